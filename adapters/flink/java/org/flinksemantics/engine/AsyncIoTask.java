package org.flinksemantics.engine;

import java.io.File;
import java.lang.reflect.Array;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.function.Consumer;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobInfo;
import org.apache.flink.api.common.JobInfoImpl;
import org.apache.flink.api.common.TaskInfo;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.accumulators.AccumulatorRegistry;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.executiongraph.ExecutionAttemptID;
import org.apache.flink.runtime.metrics.groups.TaskMetricGroup;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.runtime.state.LocalRecoveryConfig;
import org.apache.flink.streaming.runtime.tasks.OneInputStreamTask;
import org.apache.flink.util.SimpleUserCodeClassLoader;
import org.apache.flink.util.UserCodeClassLoader;

/**
 * The async_io area's task around Flink's AsyncWaitOperator: a real {@link OneInputStreamTask}
 * (AbstractStreamOperator.setup and initializeState read it) over an {@link Environment} made as a
 * dynamic proxy, since Flink's test environments are not in the release jars. Every method answers a
 * neutral value (an empty configuration, unregistered metrics, a proxy for an interface);
 * {@code failExternally}, how AsyncWaitOperator fails the task, goes to the engine; the TaskStateManager's
 * {@code prioritizedOperatorState} and {@code getRestoreCheckpointId} give the state to restore (a
 * checkpoint's OperatorSubtaskState, as the JobManager hands it to a restored task), or none.
 */
final class AsyncIoTask {

    private AsyncIoTask() {
    }

    /**
     * A task whose environment reports failExternally to {@code onFail} and restores {@code restored}
     * (taken at checkpoint {@code checkpoint}), or nothing when it is null.
     */
    static OneInputStreamTask<Object, Object> create(Consumer<Throwable> onFail, OperatorSubtaskState restored,
            long checkpoint) throws Exception {
        Environment env = (Environment) proxy(Environment.class, new Restore(onFail, restored, checkpoint));
        return new OneInputStreamTask<>(env);
    }

    /** What the proxies answer beyond neutral values. */
    record Restore(Consumer<Throwable> onFail, OperatorSubtaskState state, long checkpoint) {
    }

    /** A proxy's own answers to some methods; {@link #NEUTRAL} for the others (they get neutral values). */
    interface Answers {
        Object answer(String method, Object[] args);
    }

    static final Object NEUTRAL = new Object();

    /** The async_io task's answers: failExternally to the engine, the state to restore. */
    static Answers answers(Restore restore) {
        return (method, args) -> switch (method) {
            case "failExternally" -> {
                restore.onFail().accept((Throwable) args[0]);
                yield null;
            }
            case "prioritizedOperatorState" -> restore.state() == null ? PrioritizedOperatorSubtaskState.empty(0L)
                    : new PrioritizedOperatorSubtaskState.Builder(restore.state(), List.of(),
                            restore.checkpoint()).build();
            case "getRestoreCheckpointId" ->
                    restore.state() == null ? Optional.empty() : Optional.of(restore.checkpoint());
            default -> NEUTRAL;
        };
    }

    static Object proxy(Class<?> type, Restore restore) {
        return proxy(type, "async_io", answers(restore));
    }

    static Object neutral(Class<?> r, Restore restore) {
        return neutral(r, "async_io", answers(restore));
    }

    /** A proxy of {@code type} giving {@code answers}, else neutral values (the task named {@code name}). */
    static Object proxy(Class<?> type, String name, Answers answers) {
        return Proxy.newProxyInstance(AsyncIoTask.class.getClassLoader(), new Class<?>[] {type}, (p, m, args) -> {
            switch (m.getName()) {
                case "toString":
                    return type.getSimpleName();
                case "hashCode":
                    return System.identityHashCode(p);
                case "equals":
                    return p == args[0];
                default:
                    Object answer = answers.answer(m.getName(), args);
                    return answer != NEUTRAL ? answer : neutral(m.getReturnType(), name, answers);
            }
        });
    }

    /** A neutral answer: an empty configuration, unregistered metrics, nothing restored, a proxy for an interface. */
    static Object neutral(Class<?> r, String name, Answers answers) {
        if (r == boolean.class) {
            return false;
        } else if (r == int.class) {
            return 0;
        } else if (r == long.class) {
            return 0L;
        } else if (r == double.class) {
            return 0.0;
        } else if (r == String.class) {
            return name;
        } else if (r == Configuration.class) {
            return new Configuration();
        } else if (r == ClassLoader.class) {
            return AsyncIoTask.class.getClassLoader();
        } else if (r == ExecutionConfig.class) {
            return new ExecutionConfig();
        } else if (r == TaskMetricGroup.class) {
            return UnregisteredMetricGroups.createUnregisteredTaskMetricGroup();
        } else if (r == TaskInfo.class) {
            return new TaskInfoImpl(name, 128, 0, 1, 0);
        } else if (r == ExecutionAttemptID.class) {
            return ExecutionAttemptID.randomId();
        } else if (r == JobInfo.class) {
            return new JobInfoImpl(new JobID(), name);
        } else if (r == JobID.class) {
            return new JobID();
        } else if (r == UserCodeClassLoader.class) {
            return SimpleUserCodeClassLoader.create(AsyncIoTask.class.getClassLoader());
        } else if (r == AccumulatorRegistry.class) {
            return new AccumulatorRegistry(new JobID(), ExecutionAttemptID.randomId());
        } else if (r == Optional.class) {
            return Optional.empty();
        } else if (r == OptionalLong.class) {
            return OptionalLong.empty();
        } else if (r == PrioritizedOperatorSubtaskState.class) {
            return PrioritizedOperatorSubtaskState.empty(0L);
        } else if (r == LocalRecoveryConfig.class) {
            return LocalRecoveryConfig.BACKUP_AND_RECOVERY_DISABLED;
        } else if (r == File.class) {
            return new File(System.getProperty("java.io.tmpdir"));
        } else if (r == String[].class) {
            return new String[] {System.getProperty("java.io.tmpdir")};
        } else if (r.isArray()) {
            return Array.newInstance(r.getComponentType(), 0);
        } else if (r.isInterface()) {
            return proxy(r, name, answers);
        }
        return null;
    }
}
