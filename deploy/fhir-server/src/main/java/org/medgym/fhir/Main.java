package org.medgym.fhir;

import ca.uhn.fhir.context.FhirContext;
import ca.uhn.fhir.rest.api.EncodingEnum;
import ca.uhn.fhir.rest.server.FifoMemoryPagingProvider;
import ca.uhn.fhir.rest.server.RestfulServer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.TimeZone;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * medgym's FHIR R4 server: HAPI FHIR's RestfulServer at /fhir on embedded
 * Jetty, serving the resources of the NDJSON files in --data from memory.
 *
 * <pre>java -jar fhir-server.jar --data DIR [--port 8090] [--host 127.0.0.1]</pre>
 *
 * It prints one line when it is ready to serve:
 * "medgym-fhir-server ready: http://HOST:PORT/fhir ..." (port 0 picks a free one).
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    TimeZone.setDefault(TimeZone.getTimeZone("UTC")); // a date without a zone means UTC, as the data's times
    String host = "127.0.0.1";
    int port = 8090;
    Path data = null;
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      String v = i + 1 < args.length ? args[i + 1] : null;
      switch (a) {
        case "--host" -> host = need(a, v);
        case "--port" -> port = Integer.parseInt(need(a, v));
        case "--data" -> data = Path.of(need(a, v));
        default -> usage("unknown argument " + a);
      }
      i++;
    }
    if (data != null && !Files.isDirectory(data)) {
      usage("--data " + data + " is not a directory");
    }
    long t0 = System.nanoTime();
    FhirContext ctx = FhirContext.forR4();
    Store store = new Store(ctx);
    int loaded = data == null ? 0 : store.loadDir(data);
    long loadMs = (System.nanoTime() - t0) / 1_000_000;

    RestfulServer rest = new RestfulServer(ctx);
    rest.setResourceProviders(Providers.all(store));
    FifoMemoryPagingProvider paging = new FifoMemoryPagingProvider(200);
    paging.setDefaultPageSize(50);
    paging.setMaximumPageSize(1000);
    rest.setPagingProvider(paging);
    rest.setDefaultResponseEncoding(EncodingEnum.JSON);
    rest.setServerName("medgym-fhir-server");

    Server server = new Server();
    ServerConnector conn = new ServerConnector(server);
    conn.setHost(host);
    conn.setPort(port);
    server.addConnector(conn);
    ServletContextHandler handler = new ServletContextHandler();
    handler.setContextPath("/");
    handler.addServlet(new ServletHolder(rest), "/fhir/*");
    server.setHandler(handler);
    server.start();
    // Initialise the servlet now, not on the first request.
    handler.getServletHandler().getServlets()[0].getServletInstance();
    Runtime rt = Runtime.getRuntime();
    System.gc();
    long heapMb = (rt.totalMemory() - rt.freeMemory()) >> 20;
    System.out.printf("medgym-fhir-server ready: http://%s:%d/fhir loaded=%d load_ms=%d start_ms=%d heap_used_mb=%d%n",
        host, conn.getLocalPort(), loaded, loadMs, (System.nanoTime() - t0) / 1_000_000, heapMb);
    System.out.flush();
    server.join();
  }

  private static String need(String flag, String v) {
    if (v == null) {
      usage(flag + " needs a value");
    }
    return v;
  }

  private static void usage(String why) {
    System.err.println("medgym-fhir-server: " + why);
    System.err.println("usage: java -jar fhir-server.jar --data DIR [--port 8090] [--host 127.0.0.1]");
    System.exit(2);
  }
}
