package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The mini_batch area (spec/mini-batch.md) on Flink 2.3.0's own operators: the mini-batch assigners
 * (ProcTimeMiniBatchAssignerOperator, RowTimeMiniBatchAssginerOperator), the bundle operators
 * (KeyedMapBundleOperator, MapBundleOperator with CountBundleTrigger), the aggregate functions
 * (MiniBatchGroupAggFunction, MiniBatchLocalGroupAggFunction, MiniBatchGlobalGroupAggFunction,
 * GroupAggFunction), StatusWatermarkValve, ChainingOutput and the heap keyed state backend, laid out
 * and driven by {@link MiniBatchJob}; the query's generated code stands in hand-written
 * ({@link MiniBatchAggs}). Each step: a row, watermark or status enters at the source's output; an
 * advance moves {@link ManualTimeService}; checkpoint, crash, restore and end as MiniBatchJob says. A
 * configuration with mini-batch on and a latency or size not positive is given to Flink's planner
 * ({@link MiniBatchPlanner}, MB-2). Two-phase schedules run as keys of one HashMap bucket
 * ({@link MiniBatchKeys}, C1), the trace naming the schedule's keys.
 */
public final class MiniBatchEngine implements AreaEngine {

    /**
     * A system property: when true, two-phase schedules run with their own keys, not the stand-ins of
     * C1 ({@link MiniBatchJob#useStandIns}): the local aggregation's HashMap order then shows
     * (tests/test_flink_mini_batch.py).
     */
    static final String OWN_KEYS = "flinksemantics.mini_batch.own_keys";

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("mini_batch", null);
        c.put("mini_batch.rowtime", null);
        c.put("mini_batch.two_phase", null);
        c.put("mini_batch.checkpoint", null);
        c.put("mini_batch.status", null);
        c.put("mini_batch.config_validation", null);
        c.put("mini_batch.processing_time", null);
        c.put("mini_batch.watermarks", null);
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception {
        Map<String, Object> config = (Map<String, Object>) schedule.getOrDefault("config", Map.of());
        List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
        MiniBatchJob job = new MiniBatchJob(config);
        List<Long> keys = new ArrayList<>();
        for (Map<String, Object> s : steps) {
            if ("row".equals(s.get("op"))) {
                keys.add(((Number) s.get("key")).longValue());
            }
        }
        job.useStandIns(keys, Boolean.getBoolean(OWN_KEYS));
        String refused = MiniBatchPlanner.refusal(job);
        if (refused != null) {
            return AreaEngine.rejected(refused);  // MB-2
        }
        job.start(null, 0);
        for (int i = 0; i < steps.size(); i++) {
            job.step = i;
            step(job, steps.get(i));
        }
        return job.events;
    }

    static void step(MiniBatchJob job, Map<String, Object> s) throws Exception {
        String op = (String) s.get("op");
        if (!job.alive && !op.equals("restore") && !op.equals("advance")) {
            return;  // nothing reaches a crashed job (MB-28: a restore follows a crash)
        }
        switch (op) {
            case "row":
                job.row(((Number) s.get("key")).longValue(), (String) s.get("kind"), ((Number) s.get("value")).longValue());
                break;
            case "watermark":
                job.watermark(((Number) s.get("timestamp")).longValue());
                break;
            case "status":
                job.status(Boolean.TRUE.equals(s.get("idle")));
                break;
            case "advance":
                job.time.advance(((Number) s.get("ms")).longValue());
                break;
            case "checkpoint":
                job.checkpoint(((Number) s.get("id")).longValue());
                break;
            case "crash":
                job.crash();
                break;
            case "restore":
                Object id = s.get("checkpoint");
                job.restore(id == null ? null : ((Number) id).longValue());
                break;
            case "end":
                job.end();
                break;
            default:
                throw new IllegalArgumentException("not a mini_batch step: " + s);
        }
    }
}
