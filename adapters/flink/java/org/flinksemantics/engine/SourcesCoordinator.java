package org.flinksemantics.engine;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.flink.api.common.eventtime.WatermarkAlignmentParams;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.CheckpointCoordinator;
import org.apache.flink.runtime.concurrent.ComponentMainThreadExecutor;
import org.apache.flink.runtime.executiongraph.ExecutionAttemptID;
import org.apache.flink.runtime.executiongraph.ExecutionGraphID;
import org.apache.flink.runtime.executiongraph.TaskInformation;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.messages.Acknowledge;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.runtime.operators.coordination.CoordinatorStoreImpl;
import org.apache.flink.runtime.operators.coordination.OperatorCoordinator;
import org.apache.flink.runtime.operators.coordination.OperatorCoordinatorHolder;
import org.apache.flink.runtime.operators.coordination.OperatorEvent;
import org.apache.flink.runtime.scheduler.strategy.ExecutionVertexID;
import org.apache.flink.runtime.source.coordinator.SourceCoordinator;
import org.apache.flink.runtime.source.coordinator.SourceCoordinatorProvider;
import org.apache.flink.util.ExceptionUtils;
import org.apache.flink.util.FlinkException;
import org.apache.flink.util.SerializedValue;

/**
 * Flink 2.3.0's coordinator side of a FLIP-27 source, as the JobManager runs it: an
 * {@link OperatorCoordinatorHolder} (its SubtaskGatewayImpl per reader attempt: the event valve of
 * SRC-13; its LazyInitializedCoordinatorContext: failJob to the global failure handler, SRC-4,
 * SRC-27) around the {@link SourceCoordinator} that Flink's {@link SourceCoordinatorProvider}
 * builds (its SourceCoordinatorContext: reader registry, NoMoreSplits flags, SplitAssignmentTracker;
 * SRC-2, SRC-6, SRC-7, SRC-9, SRC-11, SRC-17, SRC-18, SRC-21, SRC-22, SRC-25), on the project's
 * enumerator (SourcesSource). The glue is the JobManager's surroundings, none of the rules: a main
 * thread executor run on the engine's thread (the holder asserts it), a SubtaskAccess per reader
 * attempt (a proxy: the package-private interface is the task's RPC endpoint) whose send action hands
 * the event to the reader's task (SourcesTask, Flink's SourceOperator), and a global failure handler
 * that records the cause.
 *
 * <p>Every call is followed by {@link #settle}: the coordinator thread and the main thread run
 * until neither has work, each wait guarded ({@link #GUARD_S}) so that a stuck thread is an engine
 * error naming the step, never a hang.
 */
final class SourcesCoordinator implements AutoCloseable {

    static final long GUARD_S = 30;
    private static final String PKG = "org.apache.flink.runtime.operators.coordination.";

    /** The task side: an event the coordinator sends reaches the reader's task (SourcesTask). */
    interface Reader {
        void deliver(int reader, SerializedValue<OperatorEvent> event) throws Exception;
    }

    final SourcesSource source;
    Throwable failure;  // the cause the holder's context handed to the global failure handler
    private final Reader readers;
    private final MainThread main = new MainThread();
    private final OperatorCoordinatorHolder holder;
    private final SourceCoordinator<?, ?> coordinator;
    private final JobVertexID vertex = new JobVertexID();
    private final ExecutionGraphID graph = new ExecutionGraphID();
    private final int[] attempts;
    private final boolean[] alive;
    private final CompletableFuture<?>[] running;

    /**
     * A holder and a SourceCoordinator for {@code parallelism} readers, reset to {@code restoredId}'s
     * bytes (null: none) before it starts, as RecreateOnResetOperatorCoordinator resets a new one.
     */
    SourcesCoordinator(int parallelism, SourcesSource source, long restoredId, byte[] restored, Reader readers)
            throws Exception {
        this.readers = readers;
        this.source = source;
        this.attempts = new int[parallelism];
        this.alive = new boolean[parallelism];
        this.running = new CompletableFuture<?>[parallelism];
        for (int r = 0; r < parallelism; r++) {
            running[r] = new CompletableFuture<>();
        }
        OperatorID operator = new OperatorID();
        Provider provider = new Provider(operator, source);
        holder = createHolder(operator, provider, parallelism);
        holder.lazyInitialize(this::onGlobalFailure, main, checkpointsEnabled(), parallelism);
        coordinator = (SourceCoordinator<?, ?>) holder.coordinator();
        // A fresh holder's gateways are new already: only its coordinator is reset (null: a new enumerator).
        coordinator.resetToCheckpoint(restoredId, restored);
        holder.start();
        settle("starting the coordinator");
    }

    /**
     * The holder keeps its gateways per subtask (the valve) only when checkpoints are enabled, which it
     * reads as a CheckpointCoordinator being there; none of its methods is called (the schedule's
     * checkpoint steps are the CheckpointCoordinator's calls), so an instance is allocated without its
     * constructor, whose inputs are a whole ExecutionGraph.
     */
    private static CheckpointCoordinator checkpointsEnabled() throws Exception {
        Field f = Class.forName("sun.misc.Unsafe").getDeclaredField("theUnsafe");
        f.setAccessible(true);
        Object unsafe = f.get(null);
        return (CheckpointCoordinator) unsafe.getClass().getMethod("allocateInstance", Class.class)
                .invoke(unsafe, CheckpointCoordinator.class);
    }

    /** OperatorCoordinatorHolder.create, the package-private factory Flink's scheduler tests use. */
    private OperatorCoordinatorHolder createHolder(OperatorID operator, Provider provider, int parallelism)
            throws Exception {
        Class<?> factoryType = Class.forName(PKG + "SubtaskAccess$SubtaskAccessFactory");
        Object factory = Proxy.newProxyInstance(factoryType.getClassLoader(), new Class<?>[] {factoryType},
                (p, m, a) -> switch (m.getName()) {
                    case "getAccessesForSubtask" -> List.of(access((Integer) a[0], attempts[(Integer) a[0]]));
                    case "getAccessForAttempt" -> access((Integer) a[0], (Integer) a[1]);
                    default -> objectMethod(p, m, a);
                });
        Method create = OperatorCoordinatorHolder.class.getDeclaredMethod("create", OperatorID.class,
                OperatorCoordinator.Provider.class, org.apache.flink.runtime.operators.coordination.CoordinatorStore.class,
                String.class, ClassLoader.class, int.class, int.class, factoryType, boolean.class,
                TaskInformation.class, org.apache.flink.runtime.metrics.groups.JobManagerJobMetricGroup.class);
        create.setAccessible(true);
        TaskInformation task = new TaskInformation(vertex, "sources", parallelism, 128, "SourceOperatorStreamTask",
                new Configuration());
        return (OperatorCoordinatorHolder) create.invoke(null, operator, provider, new CoordinatorStoreImpl(),
                "sources", SourcesCoordinator.class.getClassLoader(), parallelism, 128, factory, false, task,
                UnregisteredMetricGroups.createUnregisteredJobManagerJobMetricGroup());
    }

    /** The SubtaskAccess of a reader attempt: the task's side of the gateway (a proxy, see the class doc). */
    private Object access(int r, int attempt) throws ClassNotFoundException {
        Class<?> type = Class.forName(PKG + "SubtaskAccess");
        ExecutionAttemptID id = new ExecutionAttemptID(graph, new ExecutionVertexID(vertex, r), attempt);
        CompletableFuture<?> switched = running[r];
        return Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[] {type}, (p, m, a) -> switch (m.getName()) {
            case "createEventSendAction" -> (Callable<CompletableFuture<Acknowledge>>) () ->
                    send(r, attempt, (SerializedValue<?>) a[0]);
            case "getSubtaskIndex" -> r;
            case "currentAttempt" -> id;
            case "subtaskName" -> "reader " + r + " (#" + attempt + ")";
            case "hasSwitchedToRunning" -> switched;
            case "isStillRunning" -> isAlive(r, attempt);
            case "triggerTaskFailover" -> throw new IllegalStateException("Flink failed reader " + r
                    + " over an event it could not deliver", (Throwable) a[0]);
            default -> objectMethod(p, m, a);
        });
    }

    private static Object objectMethod(Object p, Method m, Object[] a) {
        return switch (m.getName()) {
            case "hashCode" -> System.identityHashCode(p);
            case "equals" -> p == a[0];
            case "toString" -> "sources engine " + m.getDeclaringClass().getSimpleName();
            default -> throw new UnsupportedOperationException(m.toString());
        };
    }

    private boolean isAlive(int r, int attempt) {
        return attempts[r] == attempt && alive[r];
    }

    /** The RPC to the task: the event reaches the reader's attempt, or fails when the attempt is gone. */
    @SuppressWarnings("unchecked")
    private CompletableFuture<Acknowledge> send(int r, int attempt, SerializedValue<?> value) {
        if (!isAlive(r, attempt)) {
            return CompletableFuture.failedFuture(new FlinkException("reader " + r + " (#" + attempt + ") is gone"));
        }
        try {
            readers.deliver(r, (SerializedValue<OperatorEvent>) value);
        } catch (Exception | AssertionError e) {
            throw new EngineError("delivering an event to reader " + r, e);
        }
        return CompletableFuture.completedFuture(Acknowledge.get());
    }

    private void onGlobalFailure(Throwable cause) {
        if (failure == null) {
            failure = cause;
        }
    }

    /** SRC-4 or SRC-27: SourceCoordinatorContext's refusal of an unregistered reader, or the enumerator's own. */
    String failureCause() {
        for (Throwable t = failure; t != null; t = t.getCause()) {
            if (t instanceof IllegalArgumentException && String.valueOf(t.getMessage()).contains("not registered")) {
                return "unregistered";
            }
        }
        return "enumerator";
    }

    // ---- the JobManager's calls, each settled ----

    /** The attempt number of reader r's current attempt. */
    int attempt(int r) {
        return attempts[r];
    }

    /** Reader r's attempt switched to running: the holder calls executionAttemptReady with its gateway. */
    void attemptRunning(int r) throws Exception {
        alive[r] = true;
        running[r].complete(null);
        settle("reader " + r + " running");
    }

    /** An event of reader r's task (registration SRC-2, request SRC-6, acknowledgement SRC-13) to the holder. */
    void fromOperator(int r, OperatorEvent event) throws Exception {
        holder.handleEventFromOperator(r, attempts[r], event);
        settle(event + " from reader " + r);
    }

    /** The enumerator pushes its head to r (the `assign` step), in the coordinator thread. */
    void push(int r) throws Exception {
        SourcesSource.Enumerator e = source.enumerator;
        e.context.runInCoordinatorThread(() -> e.push(r));
        settle("an assignment to reader " + r);
    }

    /** SRC-42: the enumerator discovers new splits, in the coordinator thread. */
    void discover(List<Integer> splits) throws Exception {
        SourcesSource.Enumerator e = source.enumerator;
        e.context.runInCoordinatorThread(() -> e.discover(splits));
        settle("discovering splits " + splits);
    }

    /** SRC-27: the enumerator throws in the coordinator thread. */
    void failEnumerator() throws Exception {
        SourcesSource.Enumerator e = source.enumerator;
        e.context.runInCoordinatorThread(e::fail);
        settle("the enumerator's failure");
    }

    /** SRC-11, SRC-13, SRC-19: the holder's checkpoint (gateways marked, then closed); null when it failed. */
    byte[] checkpoint(long id, boolean fails) throws Exception {
        source.enumerator.failNextSnapshot = fails;
        CompletableFuture<byte[]> result = new CompletableFuture<>();
        holder.checkpointCoordinator(id, result);
        settle("coordinator checkpoint " + id);
        if (!result.isDone()) {
            throw new IllegalStateException("sources engine: coordinator checkpoint " + id + " did not finish");
        }
        if (result.isCompletedExceptionally()) {
            abortTriggering(id);  // CheckpointCoordinator.onTriggerFailure
            return null;
        }
        return result.get();
    }

    /** The checkpoint's trigger fails after the coordinator's snapshot: abortCurrentTriggering opens the gateways. */
    void abortTriggering(long id) throws Exception {
        holder.abortCurrentTriggering();
        aborted(id);
    }

    /** SRC-17. */
    void completed(long id) throws Exception {
        holder.notifyCheckpointComplete(id);
        settle("the completion of checkpoint " + id);
    }

    /** SRC-18. */
    void aborted(long id) throws Exception {
        holder.notifyCheckpointAborted(id);
        settle("the abort of checkpoint " + id);
    }

    /** SRC-20: the attempt fails; its gateway's events can no longer reach it. */
    void attemptFailed(int r) throws Exception {
        alive[r] = false;
        holder.executionAttemptFailed(r, attempts[r], new FlinkException("reader " + r + " failed"));
        settle("the failure of reader " + r);
    }

    /** SRC-21, SRC-22, SRC-25: the subtask restarts from {@code restoredId} (-1: none), as a new attempt. */
    void subtaskReset(int r, long restoredId) throws Exception {
        attempts[r]++;
        running[r] = new CompletableFuture<>();
        holder.subtaskReset(r, restoredId);
        settle("resetting reader " + r);
    }

    /** Runs the coordinator thread and the main thread until neither has work; guarded. */
    private void settle(String step) throws Exception {
        for (int round = 0; round < 10_000; round++) {
            idleCoordinator(step);
            if (main.queue.isEmpty()) {
                idleCoordinator(step);
                if (main.queue.isEmpty()) {
                    return;
                }
            }
            main.runAll();
        }
        throw new IllegalStateException("sources engine: the coordinator did not settle after " + step);
    }

    private void idleCoordinator(String step) throws Exception {
        try {
            coordinator.getCoordinatorExecutor().submit(() -> { }).get(GUARD_S, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            throw new IllegalStateException("sources engine: Flink's coordinator thread did not finish "
                    + step + " within " + GUARD_S + " s", e);
        }
    }

    @Override
    public void close() throws Exception {
        Thread closer = new Thread(() -> {
            try {
                holder.close();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }, "sources-engine-close");
        closer.start();
        closer.join(TimeUnit.SECONDS.toMillis(GUARD_S));
        if (closer.isAlive()) {
            throw new IllegalStateException("sources engine: closing Flink's coordinator took over " + GUARD_S + " s");
        }
    }

    /** A failure of the engine's own glue while Flink's main thread runs it: never swallowed. */
    static final class EngineError extends RuntimeException {
        private static final long serialVersionUID = 1L;

        EngineError(String what, Throwable cause) {
            super("sources engine: " + what + " failed", cause);
        }
    }

    /** The JobManager's main thread: the engine's own thread, running what the holder hands it. */
    private static final class MainThread implements ComponentMainThreadExecutor {
        final Queue<Runnable> queue = new ConcurrentLinkedQueue<>();
        private final Thread thread = Thread.currentThread();

        /**
         * Runs what is queued. As the JobManager's RPC main thread (PekkoRpcActor.handleRunAsync) does,
         * an exception out of a runnable is logged and the thread goes on; an exception of the engine's
         * own glue inside it (EngineError) is the engine's error.
         */
        void runAll() {
            for (Runnable r = queue.poll(); r != null; r = queue.poll()) {
                try {
                    r.run();
                } catch (EngineError e) {
                    throw e;
                } catch (Throwable t) {
                    ExceptionUtils.rethrowIfFatalErrorOrOOM(t);
                    System.err.println("sources engine: Flink's main thread logs (PekkoRpcActor): Caught exception "
                            + "while executing runnable in main thread: " + t);
                }
            }
        }

        @Override
        public void assertRunningInMainThread() {
            if (Thread.currentThread() != thread) {
                throw new IllegalStateException("not in the main thread: " + Thread.currentThread().getName());
            }
        }

        @Override
        public void execute(Runnable command) {
            queue.add(command);
        }

        @Override
        public ScheduledFuture<?> schedule(Runnable command, long delay, TimeUnit unit) {
            throw new UnsupportedOperationException("no timers on the sources engine's main thread");
        }

        @Override
        public <V> ScheduledFuture<V> schedule(Callable<V> callable, long delay, TimeUnit unit) {
            throw new UnsupportedOperationException("no timers on the sources engine's main thread");
        }

        @Override
        public ScheduledFuture<?> scheduleAtFixedRate(Runnable command, long initialDelay, long period, TimeUnit unit) {
            throw new UnsupportedOperationException("no timers on the sources engine's main thread");
        }

        @Override
        public ScheduledFuture<?> scheduleWithFixedDelay(Runnable command, long initialDelay, long delay,
                TimeUnit unit) {
            throw new UnsupportedOperationException("no timers on the sources engine's main thread");
        }
    }

    /** Flink's SourceCoordinatorProvider builds the coordinator (thread factory, context, tracker). */
    private static final class Provider implements OperatorCoordinator.Provider {
        private static final long serialVersionUID = 1L;
        private final OperatorID operator;
        private final transient SourcesSource source;

        Provider(OperatorID operator, SourcesSource source) {
            this.operator = operator;
            this.source = source;
        }

        @Override
        public OperatorID getOperatorId() {
            return operator;
        }

        @Override
        public OperatorCoordinator create(OperatorCoordinator.Context context) {
            return new SourceCoordinatorProvider<>("sources", operator, source, 1,
                    WatermarkAlignmentParams.WATERMARK_ALIGNMENT_DISABLED, null).getCoordinator(context);
        }
    }
}
