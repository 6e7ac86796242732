package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.api.connector.source.SplitsAssignment;
import org.apache.flink.runtime.source.coordinator.SplitAssignmentTracker;

/**
 * The sources area (spec/sources.md) with Flink 2.3.0's split assignment bookkeeping: every
 * assignment is recorded in Flink's {@link SplitAssignmentTracker} (SRC-7), a coordinator checkpoint
 * calls its onCheckpoint (SRC-11), a notified completion its onCheckpointComplete (SRC-17), a reader
 * failure takes the splits to give back from its getAndRemoveUncheckpointedAssignment (SRC-21,
 * SRC-22), and a global failover starts a new tracker (SRC-28). The enumerator (a queue of splits
 * assigned as the schedule says), the readers and the committing sink are the project's own
 * harness around it (SourcesHarness): they are user code or a task around the tracker.
 */
public final class SourcesEngine implements AreaEngine {

    static final String REGION = "region failover needs RestartPipelinedRegionFailoverStrategy on a "
            + "hand-built SchedulingTopology, which this engine does not build yet (SRC-35..SRC-37)";
    static final String RESCALE = "a rescale redistributes SourceOperator's reader list state through "
            + "the operator state backend's RoundRobinOperatorStateRepartitioner, which this engine does "
            + "not drive yet (SRC-31)";

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("sources", null);
        c.put("sources.checkpoint", null);
        c.put("sources.reader_failover", null);
        c.put("sources.global_failover", null);
        c.put("sources.rescale", RESCALE);
        c.put("sources.unbounded", null);
        c.put("sources.region_failover", REGION);
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
        if (((Number) config.getOrDefault("tasks", 0)).intValue() > 0
                || !((List<Object>) config.getOrDefault("pipelined", List.of())).isEmpty()
                || !((List<Object>) config.getOrDefault("blocking", List.of())).isEmpty()) {
            throw new UnsupportedOperationException(REGION);
        }
        SourcesHarness run = new SourcesHarness(((Number) config.getOrDefault("readers", 1)).intValue(), sizes,
                (Boolean) config.getOrDefault("bounded", true));
        List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
        for (int i = 0; i < steps.size(); i++) {
            run.apply(i, steps.get(i));
        }
        return run.events;
    }

    /** Flink's tracker with the calls the coordinator makes (SourceCoordinator, SourceCoordinatorContext). */
    static final class Tracker {
        private final SplitAssignmentTracker<SourcesSplit> flink = new SplitAssignmentTracker<>();

        /** SRC-7: SourceCoordinatorContext.assignSplits records the assignment. */
        void assigned(int reader, int split) {
            Map<Integer, List<SourcesSplit>> a = new TreeMap<>();
            a.put(reader, List.of(new SourcesSplit(split)));
            flink.recordSplitAssignment(new SplitsAssignment<>(a));
        }

        /** SRC-11: SourceCoordinator.checkpointCoordinator calls onCheckpoint first. */
        void checkpoint(long id) throws Exception {
            flink.onCheckpoint(id);
        }

        /** SRC-17: SourceCoordinator.notifyCheckpointComplete. */
        void completed(long id) {
            flink.onCheckpointComplete(id);
        }

        /** SRC-21, SRC-22: SourceCoordinator.subtaskReset(subtask, restored checkpoint or -1). */
        List<Integer> takeBack(int reader, Long restored) {
            List<Integer> out = new ArrayList<>();
            for (SourcesSplit s : flink.getAndRemoveUncheckpointedAssignment(reader, restored == null ? -1L : restored)) {
                out.add(s.id);
            }
            return out;
        }
    }
}
