package org.medgym.fhir;

import ca.uhn.fhir.rest.api.SortOrderEnum;
import ca.uhn.fhir.rest.api.SortSpec;
import ca.uhn.fhir.rest.api.server.IBundleProvider;
import ca.uhn.fhir.rest.param.DateRangeParam;
import ca.uhn.fhir.rest.param.ReferenceParam;
import ca.uhn.fhir.rest.param.TokenOrListParam;
import ca.uhn.fhir.rest.server.exceptions.InvalidRequestException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Date;
import java.util.List;
import java.util.Set;
import org.hl7.fhir.instance.model.api.IBaseResource;
import org.hl7.fhir.instance.model.api.IPrimitiveType;
import org.hl7.fhir.r4.model.InstantType;

/** The search every clinical resource type shares: patient, code, category, date, sort. */
final class Searches {
  /** The sort parameters accepted: each sorts by the type's clinical time. */
  static final Set<String> TIME_SORTS = Set.of("date", "authoredon", "authored", "recorded-date", "onset-date");

  private Searches() {}

  static IBundleProvider run(Store store, String type, ReferenceParam patient, ReferenceParam subject,
      TokenOrListParam code, TokenOrListParam category, DateRangeParam date, SortSpec sort) {
    String pid = null;
    for (ReferenceParam r : new ReferenceParam[] {patient, subject}) {
      if (r == null) {
        continue;
      }
      if (r.getResourceType() != null && !r.getResourceType().equals("Patient")) {
        return new Page(store, List.of()); // a subject that is no Patient: none here
      }
      String id = r.getIdPart();
      if (pid != null && !pid.equals(id)) {
        return new Page(store, List.of());
      }
      pid = id;
    }
    List<Store.Entry> out = new ArrayList<>();
    for (Store.Entry e : store.candidates(type, pid)) {
      if (Store.tokenMatches(code, e.codes) && Store.tokenMatches(category, e.categories) && Store.dateMatches(date, e.time)) {
        out.add(e);
      }
    }
    if (sort != null) {
      if (sort.getChain() != null) {
        throw new InvalidRequestException("one _sort parameter at a time");
      }
      if (!TIME_SORTS.contains(sort.getParamName())) {
        throw new InvalidRequestException("_sort: only " + TIME_SORTS + " (all by the clinical time)");
      }
      Comparator<Store.Entry> c = Comparator.comparingLong(e -> e.time);
      if (sort.getOrder() == SortOrderEnum.DESC) {
        c = c.reversed();
      }
      out.sort(c); // stable: ties keep insertion order
    }
    return new Page(store, out);
  }

  /** Search results that parse only the page asked for. */
  static final class Page implements IBundleProvider {
    private final Store store;
    private final List<Store.Entry> entries;
    private final InstantType published = InstantType.now();

    Page(Store store, List<Store.Entry> entries) {
      this.store = store;
      this.entries = entries;
    }

    @Override
    public IPrimitiveType<Date> getPublished() {
      return published;
    }

    @Override
    public List<IBaseResource> getResources(int from, int to) {
      List<IBaseResource> out = new ArrayList<>();
      for (int i = Math.max(0, from); i < Math.min(to, entries.size()); i++) {
        out.add(store.parse(entries.get(i)));
      }
      return out;
    }

    @Override
    public String getUuid() {
      return null;
    }

    @Override
    public Integer preferredPageSize() {
      return null;
    }

    @Override
    public Integer size() {
      return entries.size();
    }
  }
}
