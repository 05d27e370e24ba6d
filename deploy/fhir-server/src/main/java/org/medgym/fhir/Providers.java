package org.medgym.fhir;

import ca.uhn.fhir.rest.annotation.Count;
import ca.uhn.fhir.rest.annotation.Create;
import ca.uhn.fhir.rest.annotation.IdParam;
import ca.uhn.fhir.rest.annotation.OptionalParam;
import ca.uhn.fhir.rest.annotation.Read;
import ca.uhn.fhir.rest.annotation.ResourceParam;
import ca.uhn.fhir.rest.annotation.Search;
import ca.uhn.fhir.rest.annotation.Sort;
import ca.uhn.fhir.rest.api.MethodOutcome;
import ca.uhn.fhir.rest.api.SortSpec;
import ca.uhn.fhir.rest.api.server.IBundleProvider;
import ca.uhn.fhir.rest.param.DateRangeParam;
import ca.uhn.fhir.rest.param.ReferenceParam;
import ca.uhn.fhir.rest.param.StringParam;
import ca.uhn.fhir.rest.param.TokenOrListParam;
import ca.uhn.fhir.rest.param.TokenParam;
import ca.uhn.fhir.rest.server.IResourceProvider;
import ca.uhn.fhir.rest.server.exceptions.ResourceNotFoundException;
import ca.uhn.fhir.rest.server.exceptions.UnprocessableEntityException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.hl7.fhir.instance.model.api.IAnyResource;
import org.hl7.fhir.r4.model.Condition;
import org.hl7.fhir.r4.model.Encounter;
import org.hl7.fhir.r4.model.HumanName;
import org.hl7.fhir.r4.model.IdType;
import org.hl7.fhir.r4.model.Identifier;
import org.hl7.fhir.r4.model.MedicationRequest;
import org.hl7.fhir.r4.model.Observation;
import org.hl7.fhir.r4.model.Patient;
import org.hl7.fhir.r4.model.Procedure;
import org.hl7.fhir.r4.model.Resource;
import org.hl7.fhir.r4.model.ServiceRequest;
import org.hl7.fhir.r4.model.StringType;

/**
 * The resource providers: read, search and create for each served type.
 * HAPI's RestfulServer binds requests to the annotated methods and parses
 * their parameters (an unknown parameter is refused with 400).
 */
final class Providers {
  private Providers() {}

  static List<IResourceProvider> all(Store store) {
    return List.of(new PatientProvider(store), new ObservationProvider(store), new EncounterProvider(store),
        new ConditionProvider(store), new ProcedureProvider(store), new MedicationRequestProvider(store),
        new ServiceRequestProvider(store));
  }

  /** Read and create, shared by every provider (HAPI binds inherited annotated methods). */
  abstract static class Base<T extends Resource> implements IResourceProvider {
    final Store store;
    final Class<T> type;

    Base(Store store, Class<T> type) {
      this.store = store;
      this.type = type;
    }

    @Override
    public Class<T> getResourceType() {
      return type;
    }

    /** GET [type]/[id]; 404 when there is none. */
    @Read
    public T read(@IdParam IdType id) {
      Resource r = store.read(type.getSimpleName(), id.getIdPart());
      if (r == null) {
        throw new ResourceNotFoundException(id);
      }
      return type.cast(r);
    }

    /** POST [type]: stored under a new server id. */
    @Create
    public MethodOutcome create(@ResourceParam T r) {
      if (r == null) {
        throw new UnprocessableEntityException("no resource in the request body");
      }
      String id = store.create(r);
      MethodOutcome o = new MethodOutcome(new IdType(type.getSimpleName(), id, "1"), true);
      o.setResource(r);
      return o;
    }
  }

  public static final class PatientProvider extends Base<Patient> {
    PatientProvider(Store s) {
      super(s, Patient.class);
    }


    /** Patients by id, identifier, name (any part, starts with, case-insensitive), family, given, birthdate, gender. */
    @Search(allowUnknownParams = false)
    public List<Patient> search(@OptionalParam(name = IAnyResource.SP_RES_ID) TokenParam id,
        @OptionalParam(name = Patient.SP_IDENTIFIER) TokenParam identifier,
        @OptionalParam(name = Patient.SP_NAME) StringParam name,
        @OptionalParam(name = Patient.SP_FAMILY) StringParam family,
        @OptionalParam(name = Patient.SP_GIVEN) StringParam given,
        @OptionalParam(name = Patient.SP_BIRTHDATE) DateRangeParam birthdate,
        @OptionalParam(name = Patient.SP_GENDER) TokenParam gender,
        @Count Integer count) {
      List<Patient> out = new ArrayList<>();
      for (Store.Entry e : store.candidates("Patient", null)) {
        Patient p = (Patient) store.parse(e);
        if (id != null && !id.getValue().equals(e.id)) {
          continue;
        }
        if (identifier != null && !hasIdentifier(p, identifier)) {
          continue;
        }
        if (name != null && !nameMatches(p, name, true, true)
            || family != null && !nameMatches(p, family, true, false)
            || given != null && !nameMatches(p, given, false, true)) {
          continue;
        }
        if (birthdate != null && (!p.hasBirthDate() || !Store.dateMatches(birthdate, p.getBirthDate().getTime()))) {
          continue;
        }
        if (gender != null && (!p.hasGender() || !p.getGender().toCode().equals(gender.getValue()))) {
          continue;
        }
        out.add(p);
      }
      return out;
    }

    private static boolean hasIdentifier(Patient p, TokenParam t) {
      for (Identifier i : p.getIdentifier()) {
        if (t.getValue().equals(i.getValue()) && (t.getSystem() == null || t.getSystem().equals(i.getSystem()))) {
          return true;
        }
      }
      return false;
    }

    /** FHIR string search: a name part starts with the value, case-insensitively (exact with :exact). */
    private static boolean nameMatches(Patient p, StringParam s, boolean fam, boolean giv) {
      String want = s.getValue().toLowerCase(Locale.ROOT);
      for (HumanName n : p.getName()) {
        List<String> parts = new ArrayList<>();
        if (fam && n.hasFamily()) {
          parts.add(n.getFamily());
        }
        if (giv) {
          for (StringType g : n.getGiven()) {
            parts.add(g.getValue());
          }
        }
        for (String part : parts) {
          if (s.isExact() ? part.equals(s.getValue()) : part.toLowerCase(Locale.ROOT).startsWith(want)) {
            return true;
          }
        }
      }
      return false;
    }
  }

  public static final class ObservationProvider extends Base<Observation> {
    ObservationProvider(Store s) {
      super(s, Observation.class);
    }


    @Search(allowUnknownParams = false)
    public IBundleProvider search(@OptionalParam(name = Observation.SP_PATIENT) ReferenceParam patient,
        @OptionalParam(name = Observation.SP_SUBJECT) ReferenceParam subject,
        @OptionalParam(name = Observation.SP_CODE) TokenOrListParam code,
        @OptionalParam(name = Observation.SP_CATEGORY) TokenOrListParam category,
        @OptionalParam(name = Observation.SP_DATE) DateRangeParam date,
        @Sort SortSpec sort, @Count Integer count) {
      return Searches.run(store, "Observation", patient, subject, code, category, date, sort);
    }
  }

  public static final class EncounterProvider extends Base<Encounter> {
    EncounterProvider(Store s) {
      super(s, Encounter.class);
    }


    @Search(allowUnknownParams = false)
    public IBundleProvider search(@OptionalParam(name = Encounter.SP_PATIENT) ReferenceParam patient,
        @OptionalParam(name = Encounter.SP_SUBJECT) ReferenceParam subject,
        @OptionalParam(name = Encounter.SP_TYPE) TokenOrListParam type,
        @OptionalParam(name = Encounter.SP_DATE) DateRangeParam date,
        @Sort SortSpec sort, @Count Integer count) {
      return Searches.run(store, "Encounter", patient, subject, type, null, date, sort);
    }
  }

  public static final class ConditionProvider extends Base<Condition> {
    ConditionProvider(Store s) {
      super(s, Condition.class);
    }


    @Search(allowUnknownParams = false)
    public IBundleProvider search(@OptionalParam(name = Condition.SP_PATIENT) ReferenceParam patient,
        @OptionalParam(name = Condition.SP_SUBJECT) ReferenceParam subject,
        @OptionalParam(name = Condition.SP_CODE) TokenOrListParam code,
        @OptionalParam(name = Condition.SP_CATEGORY) TokenOrListParam category,
        @OptionalParam(name = Condition.SP_RECORDED_DATE) DateRangeParam date,
        @Sort SortSpec sort, @Count Integer count) {
      return Searches.run(store, "Condition", patient, subject, code, category, date, sort);
    }
  }

  public static final class ProcedureProvider extends Base<Procedure> {
    ProcedureProvider(Store s) {
      super(s, Procedure.class);
    }


    @Search(allowUnknownParams = false)
    public IBundleProvider search(@OptionalParam(name = Procedure.SP_PATIENT) ReferenceParam patient,
        @OptionalParam(name = Procedure.SP_SUBJECT) ReferenceParam subject,
        @OptionalParam(name = Procedure.SP_CODE) TokenOrListParam code,
        @OptionalParam(name = Procedure.SP_DATE) DateRangeParam date,
        @Sort SortSpec sort, @Count Integer count) {
      return Searches.run(store, "Procedure", patient, subject, code, null, date, sort);
    }
  }

  public static final class MedicationRequestProvider extends Base<MedicationRequest> {
    MedicationRequestProvider(Store s) {
      super(s, MedicationRequest.class);
    }


    @Search(allowUnknownParams = false)
    public IBundleProvider search(@OptionalParam(name = MedicationRequest.SP_PATIENT) ReferenceParam patient,
        @OptionalParam(name = MedicationRequest.SP_SUBJECT) ReferenceParam subject,
        @OptionalParam(name = MedicationRequest.SP_CODE) TokenOrListParam code,
        @OptionalParam(name = MedicationRequest.SP_CATEGORY) TokenOrListParam category,
        @OptionalParam(name = MedicationRequest.SP_AUTHOREDON) DateRangeParam date,
        @Sort SortSpec sort, @Count Integer count) {
      return Searches.run(store, "MedicationRequest", patient, subject, code, category, date, sort);
    }
  }

  public static final class ServiceRequestProvider extends Base<ServiceRequest> {
    ServiceRequestProvider(Store s) {
      super(s, ServiceRequest.class);
    }


    @Search(allowUnknownParams = false)
    public IBundleProvider search(@OptionalParam(name = ServiceRequest.SP_PATIENT) ReferenceParam patient,
        @OptionalParam(name = ServiceRequest.SP_SUBJECT) ReferenceParam subject,
        @OptionalParam(name = ServiceRequest.SP_CODE) TokenOrListParam code,
        @OptionalParam(name = ServiceRequest.SP_CATEGORY) TokenOrListParam category,
        @OptionalParam(name = ServiceRequest.SP_AUTHORED) DateRangeParam date,
        @Sort SortSpec sort, @Count Integer count) {
      return Searches.run(store, "ServiceRequest", patient, subject, code, category, date, sort);
    }
  }
}
