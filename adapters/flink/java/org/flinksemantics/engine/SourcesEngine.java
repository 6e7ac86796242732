package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The sources area (spec/sources.md) on Flink 2.3.0's own classes. The coordinator side
 * (SourcesCoordinator) is a real OperatorCoordinatorHolder around the SourceCoordinator that
 * SourceCoordinatorProvider builds: registration and the registry (SRC-4, SRC-5), split requests and
 * the NoMoreSplits flags (SRC-6, SRC-9, SRC-25), the SplitAssignmentTracker (SRC-7, SRC-11, SRC-17,
 * SRC-18, SRC-21, SRC-22), the gateways' valve (SRC-13), checkpoint failure (SRC-19), failJob (SRC-4,
 * SRC-27) and a new coordinator reset to the restore point (SRC-28). Each reader attempt
 * (SourcesTask) is Flink's SourceOperator from its SourceOperatorFactory in a SourceOperatorStreamTask:
 * restore then registration (SRC-2), events to the reader (SRC-8, SRC-9), its snapshot in operator
 * list state restored through the task's TaskStateManager (SRC-15, SRC-16), the end of input
 * (SRC-32); a rescale assigns the readers' states by StateAssignmentOperation with
 * RoundRobinOperatorStateRepartitioner (SRC-31); a job graph's failovers are decided by
 * RestartPipelinedRegionFailoverStrategy on the regions SchedulingPipelinedRegionComputeUtil computes
 * (SourcesRegions, SRC-35..SRC-37). The sink chained to each reader is Flink's
 * TwoPhaseCommitSinkFunction in a StreamSink (SRC-17's, SRC-20's and SRC-29's commits and discards,
 * SRC-38, SRC-44's final checkpoint). The enumerator, the reader and the sink's external system are the
 * project's connector code (SourcesSource, SourcesReader, SourcesSink: the spec's C1 and C2); the
 * schedule's checkpoint and failover calls are the harness's (SourcesHarness).
 */
public final class SourcesEngine implements AreaEngine {

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("sources", null);
        c.put("sources.checkpoint", null);
        c.put("sources.reader_failover", null);
        c.put("sources.global_failover", null);
        c.put("sources.rescale", null);
        c.put("sources.unbounded", null);
        c.put("sources.region_failover", null);
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception {
        Map<String, Object> config = (Map<String, Object>) schedule.getOrDefault("config", Map.of());
        List<Integer> sizes = new ArrayList<>();
        for (Object n : (List<Object>) config.getOrDefault("splits", List.of())) {
            sizes.add(((Number) n).intValue());
        }
        for (int n : sizes) {
            if (n < 0) {
                return AreaEngine.rejected("SRC-40: a split's record count must be >= 0: " + sizes);
            }
        }
        int readers = ((Number) config.getOrDefault("readers", 1)).intValue();
        int tasks = ((Number) config.getOrDefault("tasks", 0)).intValue();
        List<int[]> pipelined = edges(config.get("pipelined"));
        List<int[]> blocking = edges(config.get("blocking"));
        SourcesRegions regions = tasks == 0 && pipelined.isEmpty() && blocking.isEmpty() ? null
                : new SourcesRegions(readers + tasks, pipelined, blocking);
        boolean bounded = (Boolean) config.getOrDefault("bounded", true);
        SourcesHarness run = new SourcesHarness(readers, sizes, bounded, regions);
        List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
        try (run) {
            run.start();
            for (int i = 0; i < steps.size(); i++) {
                run.apply(i, steps.get(i));
            }
        }
        return run.events;
    }

    private static List<int[]> edges(Object list) {
        List<int[]> out = new ArrayList<>();
        if (list != null) {
            for (Object e : (List<?>) list) {
                List<?> pair = (List<?>) e;
                out.add(new int[] {((Number) pair.get(0)).intValue(), ((Number) pair.get(1)).intValue()});
            }
        }
        return out;
    }
}
