package org.flinksemantics.engine;

import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.json.JsonWriteFeature;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.json.JsonMapper;

/**
 * The engine side of the process protocol (docs/process-protocol.md): one JSON object a line on
 * stdin and stdout, stderr free. Says hello (the engines of the areas, their capabilities, completion
 * orders and expected failures), then answers each "run" with the traces of its schedules, one per
 * schedule in order, or an "error"; exits 0 on "close" or at the end of input.
 *
 * <p>Usage: {@code java -cp <flink jars>:<classes> org.flinksemantics.engine.Main [expected-failures dir]}.
 * The directory holds {@code <area>.json}, {rule: reason}, for the areas that have an engine.
 */
public final class Main {

    static final String[] AREAS = {"async_io", "sources", "watermarks", "key_groups", "mini_batch"};
    static final String NO_ENGINE = "no engine for this area yet";

    private final ObjectMapper json = JsonMapper.builder().enable(JsonWriteFeature.ESCAPE_NON_ASCII).build();
    private final Map<String, AreaEngine> engines = new LinkedHashMap<>();
    private final PrintStream out;

    Main(PrintStream out) {
        this.out = out;
        for (String area : AREAS) {
            AreaEngine engine = engineOf(area);
            if (engine != null) {
                engines.put(area, engine);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        // Flink's classes log through log4j 2, whose default configuration writes to stdout: keep the
        // protocol's stream for the protocol (stdout), everything else to stderr.
        System.setProperty("log4j2.level", "OFF");
        System.setProperty("org.apache.logging.log4j.level", "OFF");
        PrintStream protocol = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Path failures = args.length > 0 ? Path.of(args[0]) : null;
        new Main(protocol).serve(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)), failures);
    }

    /** org.flinksemantics.engine.<Area>Engine, or null when the area has none. */
    static AreaEngine engineOf(String area) {
        StringBuilder name = new StringBuilder();
        for (String part : area.split("_")) {
            name.append(Character.toUpperCase(part.charAt(0))).append(part.substring(1));
        }
        try {
            Class<?> c = Class.forName("org.flinksemantics.engine." + name + "Engine");
            return (AreaEngine) c.getDeclaredConstructor().newInstance();
        } catch (ClassNotFoundException e) {
            return null;
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot start the engine of " + area, e);
        }
    }

    void serve(BufferedReader in, Path failures) throws Exception {
        send(hello(failures));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> message;
            try {
                message = json.readValue(line, Map.class);
            } catch (Exception e) {
                send(error(null, "not a JSON object: " + e.getMessage()));
                continue;
            }
            Object type = message.get("type");
            if ("close".equals(type)) {
                return;
            } else if ("run".equals(type)) {
                send(run(message));
            } else {
                send(error(message.get("id"), "unknown message type " + type));
            }
        }
    }

    Map<String, Object> hello(Path failures) throws Exception {
        Map<String, Object> capabilities = new LinkedHashMap<>();
        Map<String, Object> orders = new LinkedHashMap<>();
        Map<String, Object> expected = new LinkedHashMap<>();
        for (String area : AREAS) {
            AreaEngine engine = engines.get(area);
            if (engine == null) {
                capabilities.put(area, NO_ENGINE);
                continue;
            }
            capabilities.putAll(engine.capabilities());
            orders.put(area, engine.completionOrder());
            Path file = failures == null ? null : failures.resolve(area + ".json");
            if (file != null && Files.isRegularFile(file)) {
                expected.putAll(json.readValue(file.toFile(), Map.class));
            }
        }
        Map<String, Object> engine = new LinkedHashMap<>();
        engine.put("name", "flink");
        engine.put("version", "Apache Flink " + org.apache.flink.runtime.util.EnvironmentInformation.getVersion()
                + " (Java classes)");
        Map<String, Object> hello = new LinkedHashMap<>();
        hello.put("type", "hello");
        hello.put("protocol", 1);
        hello.put("engine", engine);
        hello.put("capabilities", capabilities);
        hello.put("completion_order", orders);
        hello.put("expected_failures", expected);
        return hello;
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> run(Map<String, Object> message) {
        Object id = message.get("id");
        List<Object> traces = new ArrayList<>();
        Object schedules = message.get("schedules");
        if (!(schedules instanceof List)) {
            return error(id, "a run needs a list of schedules");
        }
        int index = 0;
        for (Object s : (List<Object>) schedules) {
            try {
                Map<String, Object> schedule = (Map<String, Object>) s;
                AreaEngine engine = engines.get((String) schedule.get("area"));
                if (engine == null) {
                    return error(id, "schedule " + index + ": " + NO_ENGINE + ": " + schedule.get("area"));
                }
                traces.add(Map.of("events", engine.run(schedule)));
            } catch (Exception | AssertionError e) {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                return error(id, "schedule " + index + ": " + trace);
            }
            index++;
        }
        Map<String, Object> reply = new LinkedHashMap<>();
        reply.put("type", "traces");
        reply.put("id", id);
        reply.put("traces", traces);
        return reply;
    }

    static Map<String, Object> error(Object id, String text) {
        Map<String, Object> reply = new LinkedHashMap<>();
        reply.put("type", "error");
        reply.put("id", id);
        reply.put("message", text);
        return reply;
    }

    void send(Map<String, Object> message) throws Exception {
        out.println(json.writeValueAsString(message));
        out.flush();
    }
}
