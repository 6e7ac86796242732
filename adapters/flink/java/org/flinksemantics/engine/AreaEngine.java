package org.flinksemantics.engine;

import java.util.List;
import java.util.Map;

/**
 * One area of the spec run on Flink 2.3.0's own classes. Main finds an area's engine by name,
 * {@code org.flinksemantics.engine.<Area>Engine} (key_groups: KeyGroupsEngine), with a public
 * constructor taking no arguments.
 */
public interface AreaEngine {

    /** The area's capability and its features: null when supported, else the reason (spec/adapter.py). */
    Map<String, String> capabilities();

    /** "scripted" (calls complete when the schedule says) or "free" (spec/adapter.py). */
    default String completionOrder() {
        return "scripted";
    }

    /**
     * Runs one schedule (spec/schedules.md, its JSON form as maps, lists, strings, numbers, booleans
     * and nulls) from a fresh operator and gives its trace's events, each a map with "step", "event"
     * and the kind's fields. A configuration the classes refuse gives the single event
     * {@code {"step": -1, "event": "rejected", "reason": ...}}.
     */
    List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception;

    /** An event of a trace: its step, its kind, then field, value, field, value... */
    static Map<String, Object> event(int step, String kind, Object... fields) {
        Map<String, Object> e = new java.util.LinkedHashMap<>();
        e.put("step", step);
        e.put("event", kind);
        for (int i = 0; i < fields.length; i += 2) {
            e.put((String) fields[i], fields[i + 1]);
        }
        return e;
    }

    /** The trace of a refused configuration. */
    static List<Map<String, Object>> rejected(String reason) {
        return List.of(event(-1, "rejected", "reason", reason == null ? "" : reason));
    }
}
