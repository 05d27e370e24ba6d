# MedCalc-Bench reference calculators for medgym.
#
# Derived from MedCalc-Bench v1.0 (github.com/ncbi-nlp/MedCalc-Bench, tag
# version-1.0; Khandekar et al., arXiv:2406.12036), CC-BY-SA 4.0. This file is
# licensed CC-BY-SA 4.0 as well; see LICENSE-MEDCALC.md next to it.
#
# Each calculator is a function over a row's "Relevant Entities" dict
# (values with units come as [value, unit]; missing criteria count as absent
# or normal). The file is cut into sections by "# @section NAME" lines and
# "# @uses A B" lines name the sections a section needs; medgym's task loader
# assembles a self-contained reference program from them.

# @section common
import math
import datetime
import sys

MOLAR_MASS = {
    "creatinine": 113.12,
    "bilirubin": 584.66,
    "glucose": 180.16,
    "bun": 28.02,
    "cholesterol": 386.65,
    "triglycerides": 885.7,
    "calcium": 40.08,
    "sodium": 22.99,
    "potassium": 39.1,
    "chloride": 35.45,
    "bicarbonate": 61.02,
    "albumin": 66500.0,
    "hemoglobin": 16114.5,  # per haem monomer, the unit of Hb in mmol/L
}
VALENCE = {"calcium": 2}

_MASS_MG_PER_DL = {"mg/dl": 1.0, "g/dl": 1000.0, "g/l": 100.0, "mg/l": 0.1, "mg/ml": 100.0, "µg/ml": 0.1}


def _unit(u):
    return u.strip().lower().replace("μ", "µ").replace("umol", "µmol").replace(" ", "")


def _to_mmol_per_l(value, unit, analyte):
    u = _unit(unit)
    if u == "mmol/l":
        return value
    if u == "µmol/l":
        return value / 1000.0
    if u == "meq/l":
        return value / VALENCE.get(analyte, 1)
    if u in _MASS_MG_PER_DL:
        return value * _MASS_MG_PER_DL[u] * 10.0 / MOLAR_MASS[analyte]
    raise ValueError("unknown unit %r for %s" % (unit, analyte))


def conc(e, key, analyte, target, default=None):
    """Concentration of e[key] in unit target (mg/dL, g/dL, mmol/L, mEq/L, µmol/L)."""
    v = e.get(key)
    if v is None:
        return default
    value, unit = float(v[0]), v[1]
    t, u = _unit(target), _unit(unit)
    if t == u:
        return value
    if t in _MASS_MG_PER_DL and u in _MASS_MG_PER_DL:
        return value * _MASS_MG_PER_DL[u] / _MASS_MG_PER_DL[t]
    mmol = _to_mmol_per_l(value, unit, analyte)
    if t == "mmol/l":
        return mmol
    if t == "µmol/l":
        return mmol * 1000.0
    if t == "meq/l":
        return mmol * VALENCE.get(analyte, 1)
    if t in _MASS_MG_PER_DL:
        return mmol * MOLAR_MASS[analyte] / 10.0 / _MASS_MG_PER_DL[t]
    raise ValueError("unknown target unit %r" % target)


class UnknownValue(ValueError):
    """A categorical input outside a calculator's vocabulary (MedCalc-Bench's
    parameter definitions): a clear error naming the calculator, the parameter
    and the value, never a bare KeyError."""


def _norm(v):
    return " ".join(str(v).strip().lower().split())


def choice(e, key, table, default, calc):
    """The points of e[key] in table (keys lower-case, single-spaced); default
    (a key of table) when the parameter is absent."""
    v = e.get(key)
    if v is None:
        return table[default]
    k = _norm(v)
    if k not in table:
        raise UnknownValue("calculator %s: parameter %r: unknown value %r (known: %s)"
                           % (calc, key, v, ", ".join(repr(x) for x in sorted(table))))
    return table[k]


SEX = {"male": False, "m": False, "female": True, "f": True}


def flag(e, *keys):
    """True when any of keys is reported present."""
    for k in keys:
        v = e.get(k)
        if isinstance(v, str):
            v = v.strip().lower() not in ("", "false", "no", "absent", "none", "not mentioned", "not mentinoed")
        if v:
            return True
    return False


def age_years(e, default=None):
    v = e.get("age")
    if v is None:
        return default
    value, unit = float(v[0]), _unit(v[1])
    if unit.startswith("month"):
        return value / 12.0
    if unit.startswith("week"):
        return value / 52.0
    if unit.startswith("day"):
        return value / 365.0
    return value


WEIGHT_KG = {"kg": 1.0, "lbs": 0.453592, "lb": 0.453592, "g": 0.001, "oz": 0.0283495}
HEIGHT_CM = {"cm": 1.0, "m": 100.0, "in": 2.54, "ft": 30.48, "mm": 0.1}


def weight_kg(e, key="weight"):
    factor = choice({key + " unit": _unit(e[key][1])}, key + " unit", WEIGHT_KG, None, sys._getframe(1).f_code.co_name)
    return factor * float(e[key][0])


def height_cm(e, key="height"):
    factor = choice({key + " unit": _unit(e[key][1])}, key + " unit", HEIGHT_CM, None, sys._getframe(1).f_code.co_name)
    return factor * float(e[key][0])


def temp_c(e, key="Temperature", default=None):
    v = e.get(key)
    if v is None:
        return default
    value, unit = float(v[0]), _unit(v[1])
    if "fahr" in unit or "fahre" in unit or unit in ("°f", "f"):
        return (value - 32.0) * 5.0 / 9.0
    return value


def count_per_ul(e, key, default=None):
    """A cell count per µL (mm³); 'm^3' is read as mm³, 'L' as per litre."""
    v = e.get(key)
    if v is None:
        return default
    value, unit = float(v[0]), _unit(v[1])
    if unit in ("l",):
        return value / 1e6
    return value


def number(e, key, default=None):
    v = e.get(key)
    if v is None:
        return default
    if isinstance(v, (list, tuple)):
        return float(v[0])
    return float(v)


def is_female(e, calc=None):
    return choice(e, "sex", SEX, "male", calc or sys._getframe(1).f_code.co_name)


def parse_date(s):
    return datetime.datetime.strptime(s.strip(), "%m/%d/%Y").date()


def rr_interval(e):
    return 60.0 / number(e, "Heart Rate or Pulse")


# @section bmi
# @uses common
def bmi(e):
    h = height_cm(e) / 100.0
    return weight_kg(e) / (h * h)


# @section ideal_body_weight
# @uses common
def ideal_body_weight(e):
    inches = height_cm(e) * 0.393701
    base = 45.5 if is_female(e) else 50.0
    return base + 2.3 * (inches - 60.0)


# @section adjusted_body_weight
# @uses common ideal_body_weight
def adjusted_body_weight(e):
    ibw = ideal_body_weight(e)
    return ibw + 0.4 * (weight_kg(e) - ibw)


# @section creatinine_clearance
# @uses common bmi ideal_body_weight adjusted_body_weight
def creatinine_clearance(e):
    """Cockcroft-Gault with MDCalc's weight rule: underweight → actual weight,
    normal BMI → min(ideal, actual), overweight or obese → adjusted weight."""
    b = bmi(e)
    w = weight_kg(e)
    if b < 18.5:
        wt = w
    elif b < 25:
        wt = min(ideal_body_weight(e), w)
    else:
        wt = adjusted_body_weight(e)
    scr = conc(e, "creatinine", "creatinine", "mg/dL")
    sex = 0.85 if is_female(e) else 1.0
    return (140.0 - age_years(e)) * wt * sex / (72.0 * scr)


# @section ckd_epi
# @uses common
def ckd_epi(e):
    """CKD-EPI 2021 (race-free) creatinine equation."""
    scr = conc(e, "creatinine", "creatinine", "mg/dL")
    female = is_female(e)
    k = 0.7 if female else 0.9
    a = -0.241 if female else -0.302
    r = scr / k
    gfr = 142.0 * min(r, 1.0) ** a * max(r, 1.0) ** -1.200 * 0.9938 ** age_years(e)
    return gfr * (1.012 if female else 1.0)


# @section cha2ds2_vasc
# @uses common
def cha2ds2_vasc(e):
    age = age_years(e, 0)
    s = 2 if age >= 75 else 1 if age >= 65 else 0
    s += 1 if is_female(e) else 0
    s += 1 if flag(e, "Congestive Heart Faliure", "Congestive Heart Failure") else 0
    s += 1 if flag(e, "Hypertension history") else 0
    s += 2 if flag(e, "Stroke", "Transient Ischemic Attacks History", "Thromboembolism history") else 0
    s += 1 if flag(e, "Vascular disease history") else 0
    s += 1 if flag(e, "Diabetes history") else 0
    return s


# @section mean_arterial_pressure
# @uses common
def mean_arterial_pressure(e):
    return 2.0 / 3.0 * number(e, "Diastolic Blood Pressure") + 1.0 / 3.0 * number(e, "Systolic Blood Pressure")


# @section calcium_correction
# @uses common
def calcium_correction(e):
    ca = conc(e, "Calcium", "calcium", "mg/dL")
    alb = conc(e, "Albumin", "albumin", "g/dL")
    return 0.8 * (4.0 - alb) + ca


# @section wells_pe
# @uses common
def wells_pe(e):
    s = 0.0
    s += 3 if flag(e, "Clinical signs and symptoms of Deep Vein Thrombosis") else 0
    s += 3 if flag(e, "Pulmonary Embolism is #1 diagnosis OR equally likely") else 0
    s += 1.5 if number(e, "Heart Rate or Pulse", 0) > 100 else 0
    s += 1.5 if flag(e, "Immobilization for at least 3 days", "Surgery in the previous 4 weeks") else 0
    s += 1.5 if flag(e, "Previously Documented Pulmonary Embolism", "Previously documented Deep Vein Thrombosis") else 0
    s += 1 if flag(e, "Hemoptysis") else 0
    s += 1 if flag(e, "Malignancy with treatment within 6 months or palliative") else 0
    return s


# @section mdrd
# @uses common
def mdrd(e):
    scr = conc(e, "creatinine", "creatinine", "mg/dL")
    gfr = 175.0 * scr ** -1.154 * age_years(e) ** -0.203
    if is_female(e):
        gfr *= 0.742
    if "black" in str(e.get("Race", "")).lower():
        gfr *= 1.212
    return gfr


# @section qtc_bazett
# @uses common
def qtc_bazett(e):
    return number(e, "QT interval") / math.sqrt(rr_interval(e))


# @section due_date
# @uses common
def due_date(e):
    """Naegele's rule adjusted for cycle length: LMP + 280 days + (cycle - 28)."""
    lmp = parse_date(e["Last menstrual date"])
    cycle = int(e.get("cycle length", 28))
    d = lmp + datetime.timedelta(days=280 + (cycle - 28))
    return d.strftime("%m/%d/%Y")


# @section child_pugh
# @uses common
# Pugh 1973 / MDCalc: ascites absent 1, slight 2, moderate(-severe) 3;
# encephalopathy none 1, grade 1-2 2, grade 3-4 3.
CHILD_PUGH_ASCITES = {"absent": 1, "none": 1, "slight": 2, "mild": 2, "moderate": 3, "severe": 3,
                      "moderate to severe": 3}
CHILD_PUGH_ENCEPHALOPATHY = {"no encephalopathy": 1, "none": 1, "grade 0": 1, "grade 1-2": 2, "grade 3-4": 3}

def child_pugh(e):
    inr = number(e, "international normalized ratio", 1.0)
    s = 1 if inr < 1.7 else 2 if inr <= 2.3 else 3
    bili = conc(e, "Bilirubin", "bilirubin", "mg/dL", 1.0)
    s += 1 if bili < 2 else 2 if bili <= 3 else 3
    alb = conc(e, "Albumin", "albumin", "g/dL", 4.0)
    s += 1 if alb > 3.5 else 2 if alb >= 2.8 else 3
    s += choice(e, "Ascites", CHILD_PUGH_ASCITES, "absent", "Child-Pugh")
    s += choice(e, "Encephalopathy", CHILD_PUGH_ENCEPHALOPATHY, "no encephalopathy", "Child-Pugh")
    return s


# @section wells_dvt
# @uses common
def wells_dvt(e):
    s = 0
    for k in ("Active cancer", "Calf swelling >3 centimeters compared to the other leg",
              "Collateral (nonvaricose) superficial veins present", "Entire Leg Swollen",
              "Localized tenderness along the deep venous system", "Pitting edema, confined to symptomatic leg",
              "Paralysis, paresis, or recent plaster immobilization of the lower extremity",
              "Previously documented Deep Vein Thrombosis"):
        s += 1 if flag(e, k) else 0
    s += 1 if flag(e, "Bedridden recently >3 days or major surgery within 12 weeks", "Major surgery within 12 weeks") else 0
    s -= 2 if flag(e, "Alternative diagnosis to Deep Vein Thrombosis as likely or more likely") else 0
    return s


# @section rcri
# @uses common
def rcri(e):
    s = 1 if flag(e, "Elevated-risk surgery") else 0
    s += 1 if flag(e, "History of ischemic heart disease") else 0
    s += 1 if flag(e, "Congestive Heart Failure criteria for the Cardiac Risk Index rule") else 0
    # MedCalc-Bench's RCRI parameter is "Cerebrovascular disease history"; some
    # rows also carry a stray "History of cerebrovascular disease" key from
    # another calculator's extraction, which RCRI does not read.
    s += 1 if flag(e, "Cerebrovascular disease history") else 0
    s += 1 if flag(e, "Pre-operative treatment with insulin") else 0
    s += 1 if conc(e, "Pre-operative creatinine", "creatinine", "mg/dL", 0.0) > 2 else 0
    return s


# @section heart_score
# @uses common
HEART_HISTORY = {"slightly suspicious": 0, "moderately suspicious": 1, "highly suspicious": 2}
HEART_ECG = {"normal": 0, "non-specific repolarization disturbance": 1, "significant st deviation": 2}
HEART_TROPONIN = {"less than or equal to normal limit": 0,
                  "between the normal limit or up to three times the normal limit": 1,
                  "greater than three times normal limit": 2}

def heart_score(e):
    s = choice(e, "Suspicion History", HEART_HISTORY, "slightly suspicious", "HEART")
    s += choice(e, "Electrocardiogram Test", HEART_ECG, "normal", "HEART")
    age = age_years(e, 0)
    s += 2 if age >= 65 else 1 if age >= 45 else 0
    risks = sum(1 for k in ("Hypertension history", "hypercholesterolemia", "Diabetes mellitus criteria for CCI rule",
                            "obesity", "smoking", "parent or sibling with Cardiovascular disease before age 65")
                if flag(e, k))
    athero = flag(e, "atherosclerotic disease", "Transient Ischemic Attacks History")
    s += 2 if risks >= 3 or athero else 1 if risks >= 1 else 0
    s += choice(e, "Initial troponin", HEART_TROPONIN, "less than or equal to normal limit", "HEART")
    return s


# @section fib4
# @uses common
def fib4(e):
    plt = count_per_ul(e, "Platelet count") * 1e6 / 1e9
    return age_years(e) * number(e, "Aspartate aminotransferase") / (plt * math.sqrt(number(e, "Alanine aminotransferase")))


# @section centor
# @uses common
def centor(e):
    age = age_years(e, 20)
    s = 1 if 3 <= age <= 14 else -1 if age >= 45 else 0
    s += 1 if flag(e, "Exudate or swelling on tonsils") else 0
    s += 1 if flag(e, "Tender/swollen anterior cervical lymph nodes") else 0
    s += 1 if temp_c(e, default=37.0) > 38 else 0
    s += 1 if flag(e, "Cough Absent") else 0
    return s


# @section gcs
# @uses common
# MedCalc-Bench's vocabulary; "not testable" (eye, verbal) is scored as the
# normal response, as MedCalc-Bench's explanations state ("we assume the
# patient can open his or her eyes spontaneously", "... is oriented").
GCS_EYE = {"eyes open spontaneously": 4, "eye opening to verbal command": 3, "eye opening to pain": 2, "no eye opening": 1,
           "not testable": 4}
GCS_VERBAL = {"oriented": 5, "confused": 4, "inappropriate words": 3, "incomprehensible sounds": 2,
              "no verbal response": 1,
              "not testable": 5}
GCS_MOTOR = {"obeys commands": 6, "localizes pain": 5, "withdrawal from pain": 4, "flexion to pain": 3,
             "extension to pain": 2, "no motor response": 1}


def gcs(e):
    return (choice(e, "Best eye response", GCS_EYE, "eyes open spontaneously", "Glasgow Coma Score")
            + choice(e, "Best verbal response", GCS_VERBAL, "oriented", "Glasgow Coma Score")
            + choice(e, "Best motor response", GCS_MOTOR, "obeys commands", "Glasgow Coma Score"))


# @section maintenance_fluids
# @uses common
def maintenance_fluids(e):
    """Holliday-Segar 4-2-1 rule, mL/hr."""
    w = weight_kg(e)
    if w <= 10:
        return 4.0 * w
    if w <= 20:
        return 40.0 + 2.0 * (w - 10.0)
    return 60.0 + (w - 20.0)


# @section meld_na
# @uses common
def meld_na(e):
    cr = conc(e, "creatinine", "creatinine", "mg/dL")
    if flag(e, "Dialysis at least twice in the past week",
            "Continuous veno-venous hemodialysis for ≥24 hours in the past week"):
        cr = 4.0
    cr = min(max(cr, 1.0), 4.0)
    bili = max(conc(e, "Bilirubin", "bilirubin", "mg/dL"), 1.0)
    inr = max(number(e, "international normalized ratio"), 1.0)
    na = min(max(conc(e, "Sodium", "sodium", "mmol/L"), 125.0), 137.0)
    meld = round(0.957 * math.log(cr) + 0.378 * math.log(bili) + 1.120 * math.log(inr) + 0.643, 1) * 10
    if meld > 11:
        meld = meld + 1.32 * (137 - na) - 0.033 * meld * (137 - na)
    return min(meld, 40.0)


# @section steroid_conversion
# @uses common
STEROID_EQUIVALENT_MG = {
    "betamethasone iv": 0.75, "cortisone po": 25.0, "dexamethasone iv": 0.75, "dexamethasone po": 0.75,
    "hydrocortisone iv": 20.0, "hydrocortisone po": 20.0, "methylprednisolone iv": 4.0,
    "methylprednisolone po": 4.0, "prednisolone po": 5.0, "prednisone po": 5.0, "triamcinolone iv": 4.0,
}


def steroid_conversion(e):
    name, dose, unit = e["input steroid"]
    dose = float(dose) * choice({"input steroid unit": _unit(unit)}, "input steroid unit",
                                {"mg": 1.0, "g": 1000.0, "µg": 0.001, "mcg": 0.001}, None, "Steroid Conversion")
    src = choice({"input steroid": name}, "input steroid", STEROID_EQUIVALENT_MG, None, "Steroid Conversion")
    dst = choice(e, "target steroid", STEROID_EQUIVALENT_MG, None, "Steroid Conversion")
    return dose / src * dst


# @section has_bled
# @uses common
def has_bled(e):
    s = 1 if age_years(e, 0) > 65 else 0
    s += 1 if number(e, "Number of Alcoholic Drinks Per Week", 0) >= 8 else 0
    for k in ("Hypertension history", "Liver disease criteria for the HAS-BLED rule",
              "Renal disease criteria for the HAS-BLED rule", "Stroke",
              "Prior major bleeding or predisposition to bleeding", "Labile international normalized ratio",
              "Medication usage predisposing to bleeding"):
        s += 1 if flag(e, k) else 0
    return s


# @section sodium_correction
# @uses common
def sodium_correction(e):
    return conc(e, "Sodium", "sodium", "mEq/L") + 0.024 * (conc(e, "Glucose", "glucose", "mg/dL") - 100.0)


# @section glasgow_blatchford
# @uses common
def glasgow_blatchford(e):
    s = 0
    bun = conc(e, "Blood Urea Nitrogen (BUN)", "bun", "mg/dL", 0.0)
    s += 6 if bun >= 70 else 4 if bun >= 28 else 3 if bun >= 22.4 else 2 if bun >= 18.2 else 0
    hb = conc(e, "Hemoglobin", "hemoglobin", "g/dL", 16.0)
    # Blatchford 2000: women >=10.0 <12.0 -> 1, <10.0 -> 6; men >=12.0 <13.0 -> 1,
    # >=10.0 <12.0 -> 3, <10.0 -> 6 (lower bound inclusive, upper exclusive).
    if is_female(e, "Glasgow-Blatchford"):
        s += 6 if hb < 10 else 1 if hb < 12 else 0
    else:
        s += 6 if hb < 10 else 3 if hb < 12 else 1 if hb < 13 else 0
    sbp = number(e, "Systolic Blood Pressure", 120)
    s += 3 if sbp < 90 else 2 if sbp < 100 else 1 if sbp < 110 else 0
    s += 1 if number(e, "Heart Rate or Pulse", 0) >= 100 else 0
    s += 1 if flag(e, "Melena present") else 0
    s += 2 if flag(e, "Recent syncope") else 0
    s += 2 if flag(e, "Hepatic disease history") else 0
    s += 2 if flag(e, "Cardiac failure present") else 0
    return s


# @section apache_ii
# @uses common
# Knaus 1985: chronic health points, 5 for nonoperative or emergency
# postoperative patients, 2 for elective postoperative ones. MedCalc-Bench's
# vocabulary is Nonelective / Elective / Emergency (its rows also say
# Nonoperative).
APACHE_SURGERY = {"nonoperative": 5, "nonelective": 5, "emergency": 5, "emergency postoperative": 5,
                  "elective": 2, "elective postoperative": 2}

def apache_ii(e):
    s = 0
    age = age_years(e, 0)
    s += 6 if age >= 75 else 5 if age >= 65 else 3 if age >= 55 else 2 if age >= 45 else 0
    if flag(e, "History of severe organ failure or immunocompromise"):
        s += choice(e, "Surgery Type", APACHE_SURGERY, "nonoperative", "APACHE II")
    t = temp_c(e, default=37.0)
    s += 4 if t >= 41 or t < 30 else 3 if t >= 39 or t < 32 else 2 if t < 34 else 1 if t >= 38.5 or t < 36 else 0
    m = (number(e, "Systolic Blood Pressure", 120) + 2.0 * number(e, "Diastolic Blood Pressure", 80)) / 3.0
    s += 4 if m >= 160 or m < 50 else 3 if m >= 130 else 2 if m >= 110 or m < 70 else 0
    hr = number(e, "Heart Rate or Pulse", 80)
    s += 4 if hr >= 180 or hr < 40 else 3 if hr >= 140 or hr < 55 else 2 if hr >= 110 or hr < 70 else 0
    rr = number(e, "respiratory rate", 16)
    s += 4 if rr >= 50 or rr < 6 else 3 if rr >= 35 else 2 if rr < 10 else 1 if rr >= 25 or rr < 12 else 0
    fio2 = number(e, "FiO₂", 21)
    if fio2 >= 50:
        aa = number(e, "A-a gradient", 0)
        s += 4 if aa >= 500 else 3 if aa >= 350 else 2 if aa >= 200 else 0
    else:
        pao2 = number(e, "Partial pressure of oxygen (PaO₂) for Apache II", 80)
        s += 0 if pao2 > 70 else 1 if pao2 >= 61 else 3 if pao2 >= 55 else 4
    ph = number(e, "pH", 7.4)
    s += 4 if ph >= 7.7 or ph < 7.15 else 3 if ph >= 7.6 or ph < 7.25 else 2 if ph < 7.33 else 1 if ph >= 7.5 else 0
    na = conc(e, "Sodium", "sodium", "mmol/L", 140.0)
    s += 4 if na >= 180 or na <= 110 else 3 if na >= 160 or na < 120 else 2 if na >= 155 or na < 130 else 1 if na >= 150 else 0
    k = conc(e, "Potassium", "potassium", "mmol/L", 4.0)
    s += 4 if k >= 7 or k < 2.5 else 3 if k >= 6 else 2 if k < 3 else 1 if k >= 5.5 or k < 3.5 else 0
    cr = conc(e, "creatinine", "creatinine", "mg/dL", 1.0)
    cp = 4 if cr >= 3.5 else 3 if cr >= 2 else 2 if cr >= 1.5 or cr < 0.6 else 0
    s += cp * 2 if flag(e, "Acute renal failure") else cp
    hct = number(e, "Hematocrit", 40)
    s += 4 if hct >= 60 or hct < 20 else 2 if hct >= 50 or hct < 30 else 1 if hct >= 46 else 0
    wbc = count_per_ul(e, "White blood cell count", 8000.0) / 1000.0
    s += 4 if wbc >= 40 or wbc < 1 else 2 if wbc >= 20 or wbc < 3 else 1 if wbc >= 15 else 0
    s += 15 - int(number(e, "Glasgow Coma Score", 15))
    return s


# @section psi
# @uses common
def psi(e):
    age = age_years(e, 0)
    s = age - 10 if is_female(e) else age
    s += 10 if flag(e, "Nursing home resident") else 0
    s += 30 if flag(e, "Neoplastic disease") else 0
    s += 20 if flag(e, "Liver disease severity") else 0
    s += 10 if flag(e, "Congestive Heart Faliure", "Congestive Heart Failure") else 0
    s += 10 if flag(e, "Cerebrovascular disease history") else 0
    s += 10 if flag(e, "Renal disease") else 0
    s += 20 if flag(e, "Altered mental status") else 0
    s += 20 if number(e, "respiratory rate", 16) >= 30 else 0
    s += 20 if number(e, "Systolic Blood Pressure", 120) < 90 else 0
    t = temp_c(e, default=37.0)
    s += 15 if t < 35 or t >= 40 else 0
    s += 10 if number(e, "Heart Rate or Pulse", 80) >= 125 else 0
    s += 30 if number(e, "pH", 7.4) < 7.35 else 0
    s += 20 if conc(e, "Blood Urea Nitrogen (BUN)", "bun", "mg/dL", 10.0) >= 30 else 0
    s += 20 if conc(e, "Sodium", "sodium", "mmol/L", 140.0) < 130 else 0
    s += 10 if conc(e, "Glucose", "glucose", "mg/dL", 100.0) >= 250 else 0
    s += 10 if number(e, "Hematocrit", 40) < 30 else 0
    s += 10 if number(e, "Partial pressure of oxygen (PaO₂) for Apache II", 80) < 60 else 0
    s += 10 if flag(e, "Pleural effusion on x-ray") else 0
    return s


# @section serum_osmolality
# @uses common
def serum_osmolality(e):
    na = conc(e, "Sodium", "sodium", "mmol/L")
    bun = conc(e, "Blood Urea Nitrogen (BUN)", "bun", "mg/dL")
    glu = conc(e, "Glucose", "glucose", "mg/dL")
    return 2.0 * na + bun / 2.8 + glu / 18.0


# @section homa_ir
# @uses common
def homa_ir(e):
    return number(e, "Insulin") * conc(e, "Glucose", "glucose", "mg/dL") / 405.0


# @section charlson
# @uses common
# Charlson 1987 as MDCalc grades it; MedCalc-Bench's vocabulary (a boolean
# means the mildest grade present).
CCI_LIVER = {"none": 0, "mild": 1, "moderate to severe": 3, "moderate": 3, "severe": 3}
CCI_DIABETES = {"none or diet-controlled": 0, "none": 0, "uncomplicated": 1, "end-organ damage": 2}
CCI_TUMOR = {"none": 0, "localized": 2, "metastatic": 6}


def _graded(e, key, table):
    v = e.get(key)
    if isinstance(v, str):
        return choice(e, key, table, "none", "Charlson Comorbidity Index")
    if v:
        return sorted(p for p in table.values() if p > 0)[0]
    return 0


def charlson(e):
    age = age_years(e, 0)
    s = 4 if age >= 80 else 3 if age >= 70 else 2 if age >= 60 else 1 if age >= 50 else 0
    for k in ("Myocardial infarction", "Congestive Heart Faliure", "Peripheral vascular disease", "Dementia",
              "Chronic Obstructive Pulmonary Disease", "Connective tissue disease", "Peptic ulcer disease"):
        s += 1 if flag(e, k) else 0
    s += 1 if flag(e, "Cerebrovascular Accident", "Transient Ischemic Attacks History") else 0
    s += _graded(e, "Liver disease severity", CCI_LIVER)
    s += _graded(e, "Diabetes mellitus criteria for CCI rule", CCI_DIABETES)
    s += 2 if flag(e, "Hemiplegia") else 0
    s += 2 if flag(e, "Moderate to severe Chronic Kidney Disease") else 0
    s += _graded(e, "Solid tumor", CCI_TUMOR)
    s += 2 if flag(e, "Leukemia") else 0
    s += 2 if flag(e, "Lymphoma") else 0
    s += 6 if flag(e, "AIDS") else 0
    return s


# @section feverpain
# @uses common
def feverpain(e):
    return sum(1 for k in ("Fever in past 24 hours", "Absence of cough or coryza", "Symptom onset ≤3 days",
                           "Purulent tonsils", "Severe tonsil inflammation") if flag(e, k))


# @section caprini
# @uses common
CAPRINI_SURGERY = {"none": 0, "minor": 1, "major": 2, "laparoscopic": 2, "arthroscopic": 2,
                   "elective major lower extremity arthroplasty": 5}
CAPRINI_ITEMS = {
    "Major Surgery in the last month": 1, "Congestive Heart Failure in the last month": 1,
    "Sepsis in the last month": 1, "Pneumonia in the last month": 1,
    "Immobilizing plaster cast in the last month": 2, "Hip, pelvis, or leg fracture in the last month": 5,
    "Stroke in the last month": 5, "Multiple trauma in the last month": 5,
    "Acute spinal cord injury causing paralysis in the last month": 5, "Varicose veins": 1,
    "Current swollen legs": 1, "Current central venous access": 2, "Family history of thrombosis": 3,
    "Positive Factor V Leiden": 3, "Positive prothrombin 20210A": 3, "Elevated serum homocysteine": 3,
    "Positive lupus anticoagulant": 3, "Elevated anticardiolipin antibody": 3,
    "Heparin-induced thrombocytopenia": 3, "Other congenital or acquired thrombophilia": 3,
    "History of inflammatory bowel disease": 1, "Acute Myocardial infarction": 1,
    "Chronic Obstructive Pulmonary Disease": 1, "Present or previous malignancy": 2,
}
CAPRINI_MOBILITY = {"normal": 0, "normal/ambulatory": 0, "on bed rest": 1, "confined to bed >72 hours": 2}


def caprini(e):
    age = age_years(e, 0)
    s = 3 if age >= 75 else 2 if age >= 61 else 1 if age >= 41 else 0
    s += choice(e, "Surgery Type", CAPRINI_SURGERY, "none", "Caprini")
    for k, pts in CAPRINI_ITEMS.items():
        s += pts if flag(e, k) else 0
    s += 3 if flag(e, "Previously documented Deep Vein Thrombosis", "Previously Documented Pulmonary Embolism") else 0
    s += choice(e, "Mobility", CAPRINI_MOBILITY, "normal", "Caprini")
    s += 1 if number(e, "Body Mass Index (BMI)", 0) > 25 else 0
    return s


# @section free_water_deficit
# @uses common
def free_water_deficit(e):
    age = age_years(e)
    female = is_female(e)
    if age < 18:
        tbw = 0.6
    elif age < 65:
        tbw = 0.5 if female else 0.6
    else:
        tbw = 0.45 if female else 0.5
    return tbw * weight_kg(e) * (conc(e, "Sodium", "sodium", "mmol/L") / 140.0 - 1.0)


# @section anion_gap
# @uses common
def anion_gap(e):
    return (conc(e, "Sodium", "sodium", "mEq/L") - conc(e, "Chloride", "chloride", "mEq/L")
            - conc(e, "Bicarbonate", "bicarbonate", "mEq/L"))


# @section fena
# @uses common
def fena(e):
    cr = conc(e, "creatinine", "creatinine", "mg/dL")
    ucr = conc(e, "Urine creatinine", "creatinine", "mg/dL")
    na = conc(e, "Sodium", "sodium", "mEq/L")
    una = conc(e, "Urine sodium", "sodium", "mEq/L")
    return 100.0 * (cr * una) / (na * ucr)


# @section sofa
# @uses common
def sofa(e):
    s = 0
    fio2 = number(e, "FiO₂", 21) / 100.0
    pao2 = number(e, "Partial pressure of oxygen (PaO₂) for Apache II", 100)
    pf = pao2 / fio2
    vent = flag(e, "On mechanical ventilation", "Continous positive airway pressure")
    if pf < 100 and vent:
        s += 4
    elif pf < 200 and vent:
        s += 3
    elif pf < 300:
        s += 2
    elif pf < 400:
        s += 1
    dop = number(e, "DOPamine", 0)
    dob = number(e, "DOBUTamine", 0)
    epi = number(e, "EPINEPHrine", 0)
    nor = number(e, "norEPINEPHrine", 0)
    if dop > 15 or epi > 0.1 or nor > 0.1:
        s += 4
    elif dop > 5 or epi > 0 or nor > 0:
        s += 3
    elif dop > 0 or dob > 0:
        s += 2
    elif flag(e, "Hypotension") or (
            "Systolic Blood Pressure" in e and "Diastolic Blood Pressure" in e and
            (number(e, "Systolic Blood Pressure") + 2.0 * number(e, "Diastolic Blood Pressure")) / 3.0 < 70):
        s += 1
    g = number(e, "Glasgow Coma Score", 15)
    s += 4 if g < 6 else 3 if g < 10 else 2 if g < 13 else 1 if g < 15 else 0
    bili = conc(e, "Bilirubin", "bilirubin", "mg/dL", 0.5)
    s += 4 if bili >= 12 else 3 if bili >= 6 else 2 if bili >= 2 else 1 if bili >= 1.2 else 0
    plt = count_per_ul(e, "Platelet count", 200000.0) / 1000.0
    s += 4 if plt < 20 else 3 if plt < 50 else 2 if plt < 100 else 1 if plt < 150 else 0
    cr = conc(e, "creatinine", "creatinine", "mg/dL", 0.8)
    uo = number(e, "Urine Output", 1000)
    s += 4 if cr >= 5 or uo < 200 else 3 if cr >= 3.5 or uo < 500 else 2 if cr >= 2 else 1 if cr >= 1.2 else 0
    return s


# @section ldl
# @uses common
def ldl(e):
    tc = conc(e, "Total cholesterol", "cholesterol", "mg/dL")
    hdl = conc(e, "high-density lipoprotein cholesterol", "cholesterol", "mg/dL")
    tg = conc(e, "Triglycerides", "triglycerides", "mg/dL")
    return tc - hdl - tg / 5.0


# @section curb65
# @uses common
def curb65(e):
    s = 1 if flag(e, "Confusion") else 0
    # Lim 2003: urea > 7 mmol/L (BUN > 19.6 mg/dL; MDCalc rounds it to > 19).
    s += 1 if conc(e, "Blood Urea Nitrogen (BUN)", "bun", "mmol/L", 0.0) > 7 else 0
    s += 1 if number(e, "respiratory rate", 16) >= 30 else 0
    s += 1 if number(e, "Systolic Blood Pressure", 120) < 90 or number(e, "Diastolic Blood Pressure", 80) <= 60 else 0
    s += 1 if age_years(e, 0) >= 65 else 0
    return s


# @section framingham
# @uses common
def framingham(e):
    """ATP III hard CHD 10-year risk in percent; cholesterol in mg/dL."""
    age = age_years(e)
    tc = conc(e, "Total cholesterol", "cholesterol", "mg/dL")
    hdl = conc(e, "high-density lipoprotein cholesterol", "cholesterol", "mg/dL")
    sbp = number(e, "Systolic Blood Pressure")
    med = 1 if flag(e, "Blood pressure being treated with medicines") else 0
    smoker = 1 if flag(e, "Smoker") else 0
    la, ltc, lhdl, lsbp = math.log(age), math.log(tc), math.log(hdl), math.log(sbp)
    if is_female(e):
        las = math.log(min(age, 78.0))
        x = (31.764001 * la + 22.465206 * ltc - 1.187731 * lhdl + 2.552905 * lsbp + 0.420251 * med
             + 13.07543 * smoker - 5.060998 * la * ltc - 2.996945 * las * smoker - 146.5933061)
        risk = 1.0 - 0.98767 ** math.exp(x)
    else:
        las = math.log(min(age, 70.0))
        x = (52.00961 * la + 20.014077 * ltc - 0.905964 * lhdl + 1.305784 * lsbp + 0.241549 * med
             + 12.096316 * smoker - 4.605038 * la * ltc - 2.84367 * las * smoker - 2.93323 * la * la - 172.300168)
        risk = 1.0 - 0.9402 ** math.exp(x)
    return risk * 100.0


# @section perc
# @uses common
def perc(e):
    s = 1 if age_years(e, 0) >= 50 else 0
    s += 1 if number(e, "Heart Rate or Pulse", 80) >= 100 else 0
    s += 1 if number(e, "O₂ saturation percentage", 98) < 95 else 0
    for k in ("Unilateral Leg Swelling", "Hemoptysis", "Recent surgery or trauma", "Hormone use"):
        s += 1 if flag(e, k) else 0
    s += 1 if flag(e, "Previously Documented Pulmonary Embolism", "Previously documented Deep Vein Thrombosis") else 0
    return s


# @section mme
# @uses common
MME_FACTOR = {
    "codeine": 0.15, "fentanyl buccal": 0.13, "fentanyl patch": 2.4, "hydrocodone": 1.0, "hydromorphone": 5.0,
    "methadone": 4.7, "morphine": 1.0, "oxycodone": 1.5, "oxymorphone": 3.0, "tapentadol": 0.4, "tramadol": 0.2,
    "buprenorphine": 10.0,
}


def mme(e):
    total = 0.0
    for k, v in e.items():
        if not k.endswith(" Dose") or k.endswith("Per Day Dose"):
            continue
        drug = k[: -len(" Dose")]
        per_day = number(e, drug + " Dose Per Day", 1)
        total += float(v[0]) * per_day * choice({k: drug}, k, MME_FACTOR, None, "Morphine Milligram Equivalents")
    return total


# @section sirs
# @uses common
def sirs(e):
    t = temp_c(e, default=37.0)
    s = 1 if t > 38 or t < 36 else 0
    s += 1 if number(e, "Heart Rate or Pulse", 80) > 90 else 0
    s += 1 if number(e, "respiratory rate", 16) > 20 or number(e, "PaCO₂", 40) < 32 else 0
    wbc = count_per_ul(e, "White blood cell count", 8000.0)
    s += 1 if wbc > 12000 or wbc < 4000 or number(e, "Band form numbers", 0) > 10 else 0
    return s


# @section qtc_fridericia
# @uses common
def qtc_fridericia(e):
    return number(e, "QT interval") / rr_interval(e) ** (1.0 / 3.0)


# @section qtc_framingham
# @uses common
def qtc_framingham(e):
    return number(e, "QT interval") + 154.0 * (1.0 - rr_interval(e))


# @section qtc_hodges
# @uses common
def qtc_hodges(e):
    return number(e, "QT interval") + 1.75 * (number(e, "Heart Rate or Pulse") - 60.0)


# @section qtc_rautaharju
# @uses common
def qtc_rautaharju(e):
    return number(e, "QT interval") * (120.0 + number(e, "Heart Rate or Pulse")) / 180.0


# @section body_surface_area
# @uses common
def body_surface_area(e):
    """Mosteller."""
    return math.sqrt(weight_kg(e) * height_cm(e) / 3600.0)


# @section target_weight
# @uses common
def target_weight(e):
    h = height_cm(e) / 100.0
    return number(e, "Body Mass Index (BMI)") * h * h


# @section delta_gap
# @uses common anion_gap
def delta_gap(e):
    return anion_gap(e) - 12.0


# @section delta_ratio
# @uses common anion_gap delta_gap
def delta_ratio(e):
    return delta_gap(e) / (24.0 - conc(e, "Bicarbonate", "bicarbonate", "mEq/L"))


# @section albumin_corrected_anion_gap
# @uses common anion_gap
def albumin_corrected_anion_gap(e):
    return anion_gap(e) + 2.5 * (4.0 - conc(e, "Albumin", "albumin", "g/dL"))


# @section albumin_corrected_delta_gap
# @uses common anion_gap albumin_corrected_anion_gap
def albumin_corrected_delta_gap(e):
    return albumin_corrected_anion_gap(e) - 12.0


# @section albumin_corrected_delta_ratio
# @uses common anion_gap albumin_corrected_anion_gap albumin_corrected_delta_gap
def albumin_corrected_delta_ratio(e):
    return albumin_corrected_delta_gap(e) / (24.0 - conc(e, "Bicarbonate", "bicarbonate", "mEq/L"))


# @section conception_date
# @uses common
def conception_date(e):
    """MedCalc-Bench's rule: last menstrual period + 2 weeks."""
    return (parse_date(e["Last menstrual date"]) + datetime.timedelta(days=14)).strftime("%m/%d/%Y")


# @section gestational_age
# @uses common
def gestational_age(e):
    """(weeks, days) between the last menstrual period and the current date."""
    days = (parse_date(e["Current Date"]) - parse_date(e["Last menstrual date"])).days
    return (days // 7, days % 7)
