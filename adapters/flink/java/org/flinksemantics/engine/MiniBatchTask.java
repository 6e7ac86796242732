package org.flinksemantics.engine;

import java.io.File;
import java.lang.reflect.Array;
import java.lang.reflect.Constructor;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobInfo;
import org.apache.flink.api.common.JobInfoImpl;
import org.apache.flink.api.common.TaskInfo;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.accumulators.AccumulatorRegistry;
import org.apache.flink.runtime.executiongraph.ExecutionAttemptID;
import org.apache.flink.runtime.metrics.groups.TaskMetricGroup;
import org.apache.flink.util.SimpleUserCodeClassLoader;
import org.apache.flink.util.UserCodeClassLoader;
import org.apache.flink.metrics.SimpleCounter;
import org.apache.flink.metrics.groups.OperatorMetricGroup;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.LocalRecoveryConfig;
import org.apache.flink.runtime.state.TaskStateManager;
import org.apache.flink.streaming.api.operators.Input;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OneInputStreamTask;
import org.apache.flink.table.data.RowData;
import org.apache.flink.util.OutputTag;

/**
 * The mini_batch area's tasks: a real {@link OneInputStreamTask} over a proxy {@link Environment}
 * (every method a neutral answer, as AsyncIoTask's; kept here so that the areas' engines stay apart), whose {@link TaskStateManager} gives the aggregation's operator the
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
        TaskStateManager states = (TaskStateManager) Proxy.newProxyInstance(MiniBatchTask.class.getClassLoader(),
                new Class<?>[] {TaskStateManager.class}, (p, m, args) -> {
                    if (m.getName().equals("prioritizedOperatorState")) {
                        if (restored == null || !restoredOperator.equals(args[0])) {
                            return PrioritizedOperatorSubtaskState.emptyNotRestored();
                        }
                        OperatorSubtaskState state = OperatorSubtaskState.builder().setManagedKeyedState(restored).build();
                        return new PrioritizedOperatorSubtaskState.Builder(state, List.of(), checkpointId).build();
                    }
                    return objectMethod(p, m.getName(), args, neutral(m.getReturnType()));
                });
        Environment env = (Environment) Proxy.newProxyInstance(MiniBatchTask.class.getClassLoader(),
                new Class<?>[] {Environment.class}, (p, m, args) -> {
                    if (m.getName().equals("getTaskStateManager")) {
                        return states;
                    }
                    return objectMethod(p, m.getName(), args, neutral(m.getReturnType()));
                });
        return new OneInputStreamTask<>(env);
    }

    private static Object objectMethod(Object proxy, String name, Object[] args, Object otherwise) {
        switch (name) {
            case "toString":
                return "mini_batch";
            case "hashCode":
                return System.identityHashCode(proxy);
            case "equals":
                return proxy == args[0];
            default:
                return otherwise;
        }
    }

    /** A neutral answer: an empty configuration, unregistered metrics, nothing restored, a proxy for an interface. */
    static Object neutral(Class<?> r) {
        if (r == boolean.class) {
            return false;
        } else if (r == int.class) {
            return 0;
        } else if (r == long.class) {
            return 0L;
        } else if (r == double.class) {
            return 0.0;
        } else if (r == String.class) {
            return "mini_batch";
        } else if (r == Configuration.class) {
            return new Configuration();
        } else if (r == ClassLoader.class) {
            return MiniBatchTask.class.getClassLoader();
        } else if (r == ExecutionConfig.class) {
            return new ExecutionConfig();
        } else if (r == TaskMetricGroup.class) {
            return UnregisteredMetricGroups.createUnregisteredTaskMetricGroup();
        } else if (r == TaskInfo.class) {
            return new TaskInfoImpl("mini_batch", 128, 0, 1, 0);
        } else if (r == ExecutionAttemptID.class) {
            return ExecutionAttemptID.randomId();
        } else if (r == JobInfo.class) {
            return new JobInfoImpl(new JobID(), "mini_batch");
        } else if (r == JobID.class) {
            return new JobID();
        } else if (r == UserCodeClassLoader.class) {
            return SimpleUserCodeClassLoader.create(MiniBatchTask.class.getClassLoader());
        } else if (r == AccumulatorRegistry.class) {
            return new AccumulatorRegistry(new JobID(), ExecutionAttemptID.randomId());
        } else if (r == Optional.class) {
            return Optional.empty();
        } else if (r == OptionalLong.class) {
            return OptionalLong.empty();
        } else if (r == PrioritizedOperatorSubtaskState.class) {
            return PrioritizedOperatorSubtaskState.emptyNotRestored();
        } else if (r == LocalRecoveryConfig.class) {
            return LocalRecoveryConfig.BACKUP_AND_RECOVERY_DISABLED;
        } else if (r == File.class) {
            return new File(System.getProperty("java.io.tmpdir"));
        } else if (r == String[].class) {
            return new String[] {System.getProperty("java.io.tmpdir")};
        } else if (r.isArray()) {
            return Array.newInstance(r.getComponentType(), 0);
        } else if (r.isInterface()) {
            return Proxy.newProxyInstance(MiniBatchTask.class.getClassLoader(), new Class<?>[] {r},
                    (p, m, args) -> objectMethod(p, m.getName(), args, neutral(m.getReturnType())));
        }
        return null;
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
