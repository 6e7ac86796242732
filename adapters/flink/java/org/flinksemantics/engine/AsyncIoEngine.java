package org.flinksemantics.engine;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The async_io area (spec/async-io.md) on Flink 2.3.0's AsyncWaitOperator. A schedule's configuration
 * goes through AsyncDataStream ({@link AsyncIoFlinkApi}: Flink's own preconditions refuse what they
 * refuse, AIO-1 and AIO-3); each incarnation is the operator its AsyncWaitOperatorFactory creates,
 * inside a real OneInputStreamTask ({@link AsyncIoIncarnation}, {@link AsyncIoTask}); the schedule's
 * clock and timers are {@link AsyncIoTimers}, driven one timer at a time ({@link AsyncIoRun});
 * checkpoints are Flink's snapshotState of the operator's list state, restored through the task's
 * TaskStateManager ({@link AsyncIoCheckpoints}).
 */
public final class AsyncIoEngine implements AreaEngine {

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        for (String feature : List.of("", ".ordered", ".unordered", ".watermarks", ".timeout", ".status",
                ".config_validation", ".retry", ".checkpoint")) {
            c.put("async_io" + feature, null);
        }
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception {
        Map<String, Object> config = (Map<String, Object>) schedule.getOrDefault("config", Map.of());
        List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
        return new AsyncIoRun(config, steps).run();
    }
}
