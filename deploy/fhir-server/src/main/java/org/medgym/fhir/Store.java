package org.medgym.fhir;

import ca.uhn.fhir.context.FhirContext;
import ca.uhn.fhir.model.api.TemporalPrecisionEnum;
import ca.uhn.fhir.parser.StrictErrorHandler;
import ca.uhn.fhir.rest.param.DateParam;
import ca.uhn.fhir.rest.param.DateRangeParam;
import ca.uhn.fhir.rest.param.ParamPrefixEnum;
import ca.uhn.fhir.rest.param.TokenOrListParam;
import ca.uhn.fhir.rest.param.TokenParam;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import org.hl7.fhir.r4.model.CodeableConcept;
import org.hl7.fhir.r4.model.Coding;
import org.hl7.fhir.r4.model.Condition;
import org.hl7.fhir.r4.model.Encounter;
import org.hl7.fhir.r4.model.InstantType;
import org.hl7.fhir.r4.model.MedicationRequest;
import org.hl7.fhir.r4.model.Observation;
import org.hl7.fhir.r4.model.Procedure;
import org.hl7.fhir.r4.model.Reference;
import org.hl7.fhir.r4.model.Resource;
import org.hl7.fhir.r4.model.ServiceRequest;

/**
 * An in-memory resource store. Each resource is kept as its JSON text and a
 * small index entry (patient, the time searches sort and filter by, its codes
 * and categories); searches run on the index and parse only the page they
 * return. Reads and searches may run concurrently; writes take the lock.
 */
final class Store {
  /** The resource types served, in load order (referenced types first). */
  static final List<String> TYPES =
      List.of("Patient", "Encounter", "Condition", "Procedure", "MedicationRequest", "ServiceRequest", "Observation");

  /** One stored resource. */
  static final class Entry {
    final String type;
    final String id;
    final String json;
    final String patient; // the id of the Patient it is about ("" for none)
    final long time; // epoch ms of its clinical time, Long.MIN_VALUE for none
    final List<String> codes; // "system|code" of every coding of its code
    final List<String> categories; // "system|code" of its categories

    Entry(String type, String id, String json, String patient, long time, List<String> codes, List<String> categories) {
      this.type = type;
      this.id = id;
      this.json = json;
      this.patient = patient;
      this.time = time;
      this.codes = codes;
      this.categories = categories;
    }
  }

  private final FhirContext ctx;
  private final Map<String, LinkedHashMap<String, Entry>> byId = new HashMap<>();
  private final Map<String, Map<String, List<Entry>>> byPatient = new HashMap<>();
  private long created;

  Store(FhirContext ctx) {
    this.ctx = ctx;
    for (String t : TYPES) {
      byId.put(t, new LinkedHashMap<>());
      byPatient.put(t, new HashMap<>());
    }
  }

  FhirContext context() {
    return ctx;
  }

  /**
   * Loads dir/&lt;Type&gt;.ndjson for every served type present; returns the count loaded. Lines are
   * parsed in parallel, a batch at a time, and stored in file order.
   */
  int loadDir(Path dir) throws IOException {
    int n = 0;
    for (String t : TYPES) {
      Path p = dir.resolve(t + ".ndjson");
      if (!Files.exists(p)) {
        continue;
      }
      Class<? extends Resource> cls = resourceClass(t);
      try (BufferedReader r = Files.newBufferedReader(p, StandardCharsets.UTF_8)) {
        List<String> batch = new ArrayList<>(BATCH);
        int first = 1; // the line number of batch.get(0)
        int lineNo = 0;
        String line;
        while ((line = r.readLine()) != null) {
          lineNo++;
          batch.add(line);
          if (batch.size() == BATCH) {
            n += loadBatch(p, t, cls, batch, first);
            batch.clear();
            first = lineNo + 1;
          }
        }
        n += loadBatch(p, t, cls, batch, first);
      }
    }
    return n;
  }

  private static final int BATCH = 8192;

  /** Loading is strict (an unknown element or a bad value stops it); creates parse as HAPI's default, leniently. */
  private static final StrictErrorHandler STRICT = new StrictErrorHandler();

  private int loadBatch(Path p, String type, Class<? extends Resource> cls, List<String> lines, int first)
      throws IOException {
    Entry[] out = new Entry[lines.size()];
    try {
      IntStream.range(0, lines.size()).parallel().forEach(i -> {
        String line = lines.get(i);
        if (line.isBlank()) {
          return;
        }
        Resource res;
        try {
          res = ctx.newJsonParser().setParserErrorHandler(STRICT).parseResource(cls, line);
        } catch (RuntimeException e) {
          throw new IllegalArgumentException(p + " line " + (first + i) + ": " + e.getMessage(), e);
        }
        out[i] = index(type, res.getIdElement().getIdPart(), line, res);
      });
    } catch (IllegalArgumentException e) {
      throw new IOException(e.getMessage(), e);
    }
    int n = 0;
    for (Entry e : out) {
      if (e != null) {
        put(e);
        n++;
      }
    }
    return n;
  }

  @SuppressWarnings("unchecked")
  static Class<? extends Resource> resourceClass(String type) {
    try {
      return (Class<? extends Resource>) Class.forName("org.hl7.fhir.r4.model." + type);
    } catch (ClassNotFoundException e) {
      throw new IllegalArgumentException("unknown resource type " + type, e);
    }
  }

  private synchronized void put(Entry e) {
    Entry old = byId.get(e.type).put(e.id, e);
    if (old != null) {
      throw new IllegalStateException("duplicate " + e.type + "/" + e.id);
    }
    byPatient.get(e.type).computeIfAbsent(e.patient, k -> new ArrayList<>()).add(e);
  }

  /** Stores a new resource under a server-assigned id and returns the id. */
  synchronized String create(Resource res) {
    String type = res.fhirType();
    String id;
    do {
      created++;
      id = "medgym-" + created;
    } while (byId.get(type).containsKey(id));
    res.setId(id);
    res.getMeta().setVersionId("1");
    res.getMeta().setLastUpdatedElement(InstantType.now());
    put(index(type, id, ctx.newJsonParser().encodeResourceToString(res), res));
    return id;
  }

  /** The resource of type and id, parsed, or null. */
  Resource read(String type, String id) {
    Entry e;
    synchronized (this) {
      e = byId.get(type).get(id);
    }
    return e == null ? null : parse(e);
  }

  Resource parse(Entry e) {
    return ctx.newJsonParser().parseResource(resourceClass(e.type), e.json);
  }

  /** The entries of type about patient (all of the type for null), in insertion order. */
  synchronized List<Entry> candidates(String type, String patient) {
    if (patient == null) {
      return new ArrayList<>(byId.get(type).values());
    }
    return new ArrayList<>(byPatient.get(type).getOrDefault(patient, List.of()));
  }

  synchronized int size(String type) {
    return byId.get(type).size();
  }

  private static Entry index(String type, String id, String json, Resource r) {
    String patient = "";
    long time = Long.MIN_VALUE;
    List<String> codes = new ArrayList<>();
    List<String> cats = new ArrayList<>();
    switch (type) {
      case "Patient" -> patient = id;
      case "Observation" -> {
        Observation o = (Observation) r;
        patient = refId(o.getSubject());
        if (o.hasEffectiveDateTimeType()) {
          time = instant(o.getEffectiveDateTimeType().getValue());
        } else if (o.hasEffectivePeriod()) {
          time = instant(o.getEffectivePeriod().getStart());
        } else if (o.hasEffectiveInstantType()) {
          time = instant(o.getEffectiveInstantType().getValue());
        }
        codes(o.getCode(), codes);
        o.getCategory().forEach(c -> codes(c, cats));
      }
      case "Encounter" -> {
        Encounter e = (Encounter) r;
        patient = refId(e.getSubject());
        time = instant(e.getPeriod().getStart());
        e.getType().forEach(c -> codes(c, codes));
      }
      case "Condition" -> {
        Condition c = (Condition) r;
        patient = refId(c.getSubject());
        time = instant(c.getRecordedDate());
        codes(c.getCode(), codes);
        c.getCategory().forEach(x -> codes(x, cats));
      }
      case "Procedure" -> {
        Procedure p = (Procedure) r;
        patient = refId(p.getSubject());
        if (p.hasPerformedDateTimeType()) {
          time = instant(p.getPerformedDateTimeType().getValue());
        }
        codes(p.getCode(), codes);
      }
      case "MedicationRequest" -> {
        MedicationRequest m = (MedicationRequest) r;
        patient = refId(m.getSubject());
        time = instant(m.getAuthoredOn());
        if (m.hasMedicationCodeableConcept()) {
          codes(m.getMedicationCodeableConcept(), codes);
        }
        m.getCategory().forEach(x -> codes(x, cats));
      }
      case "ServiceRequest" -> {
        ServiceRequest s = (ServiceRequest) r;
        patient = refId(s.getSubject());
        time = instant(s.getAuthoredOn());
        codes(s.getCode(), codes);
        s.getCategory().forEach(x -> codes(x, cats));
      }
      default -> throw new IllegalArgumentException("unserved type " + type);
    }
    return new Entry(type, id, json, patient, time, codes, cats);
  }

  private static long instant(Date d) {
    return d == null ? Long.MIN_VALUE : d.getTime();
  }

  private static String refId(Reference ref) {
    if (ref == null || !ref.hasReference()) {
      return "";
    }
    return ref.getReferenceElement().getIdPart();
  }

  private static void codes(CodeableConcept cc, List<String> out) {
    for (Coding c : cc.getCoding()) {
      out.add((c.hasSystem() ? c.getSystem() : "") + "|" + c.getCode());
    }
  }

  /** Whether one of a token list's values matches one of the "system|code" values. */
  static boolean tokenMatches(TokenOrListParam list, List<String> values) {
    if (list == null) {
      return true;
    }
    for (TokenParam t : list.getValuesAsQueryTokens()) {
      for (String v : values) {
        int bar = v.indexOf('|');
        String system = v.substring(0, bar);
        String code = v.substring(bar + 1);
        if (!code.equals(t.getValue())) {
          continue;
        }
        if (t.getSystem() == null || t.getSystem().equals(system)) {
          return true;
        }
      }
    }
    return false;
  }

  /**
   * Whether time t (epoch ms) satisfies every bound of the date range, each
   * taken at its own precision (le2150-01-01 is before the end of that day).
   */
  static boolean dateMatches(DateRangeParam range, long t) {
    if (range == null) {
      return true;
    }
    if (t == Long.MIN_VALUE) {
      return false;
    }
    for (DateParam p : range.getValuesAsQueryTokens()) {
      if (p.getValue() == null) {
        continue;
      }
      TemporalPrecisionEnum prec = p.getPrecision();
      long start = p.getValue().getTime();
      long end = prec.add(p.getValue(), 1).getTime();
      ParamPrefixEnum prefix = p.getPrefix() == null ? ParamPrefixEnum.EQUAL : p.getPrefix();
      boolean ok = switch (prefix) {
        case GREATERTHAN, STARTS_AFTER -> t >= end;
        case GREATERTHAN_OR_EQUALS -> t >= start;
        case LESSTHAN, ENDS_BEFORE -> t < start;
        case LESSTHAN_OR_EQUALS -> t < end;
        case NOT_EQUAL -> t < start || t >= end;
        default -> t >= start && t < end; // EQUAL, APPROXIMATE
      };
      if (!ok) {
        return false;
      }
    }
    return true;
  }
}
