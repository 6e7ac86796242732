package org.flinksemantics.engine;

import java.lang.reflect.Constructor;
import java.util.List;
import org.apache.flink.metrics.SimpleCounter;
import org.apache.flink.metrics.groups.OperatorMetricGroup;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.TaskStateManager;
import org.apache.flink.streaming.api.operators.Input;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OneInputStreamTask;
import org.apache.flink.table.data.RowData;
import org.apache.flink.util.OutputTag;

/**
 * The mini_batch area's tasks: a real {@link OneInputStreamTask} over a proxy {@link Environment}
 * (AsyncIoTask's neutral answers), whose {@link TaskStateManager} gives the aggregation's operator the
 * keyed state of the checkpoint a restore starts from (StreamTaskStateInitializerImpl asks it for
 * {@code prioritizedOperatorState(operatorID)} and restores Flink's heap keyed backend from it). Also
 * Flink's {@code ChainingOutput}, the output between chained operators (package-private in Flink,
 * built by reflection).
 */
final class MiniBatchTask {

    private MiniBatchTask() {
    }

    /** A task whose operator {@code restoredOperator} restores {@code restored} (none when null). */
    static OneInputStreamTask<Object, Object> create(OperatorID restoredOperator, KeyedStateHandle restored,
            long checkpointId) throws Exception {
        AsyncIoTask.Answers answers = (method, args) -> {
            if (!method.equals("prioritizedOperatorState")) {
                return AsyncIoTask.NEUTRAL;
            }
            if (restored == null || !restoredOperator.equals(args[0])) {
                return PrioritizedOperatorSubtaskState.emptyNotRestored();
            }
            OperatorSubtaskState state = OperatorSubtaskState.builder().setManagedKeyedState(restored).build();
            return new PrioritizedOperatorSubtaskState.Builder(state, List.of(), checkpointId).build();
        };
        return new OneInputStreamTask<>((Environment) AsyncIoTask.proxy(Environment.class, "mini_batch", answers));
    }

    /** Flink's ChainingOutput into {@code input}: drops watermarks while it announced idle, repeats no status. */
    @SuppressWarnings("unchecked")
    static Output<StreamRecord<RowData>> chainingOutput(Input<RowData> input) throws Exception {
        Class<?> type = Class.forName("org.apache.flink.streaming.runtime.tasks.ChainingOutput");
        Constructor<?> make = type.getConstructor(Input.class, org.apache.flink.metrics.Counter.class,
                OperatorMetricGroup.class, OutputTag.class);
        make.setAccessible(true);
        return (Output<StreamRecord<RowData>>) make.newInstance(input, new SimpleCounter(),
                UnregisteredMetricGroups.createUnregisteredOperatorMetricGroup(), null);
    }
}
