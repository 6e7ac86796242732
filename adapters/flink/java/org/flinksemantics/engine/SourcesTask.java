package org.flinksemantics.engine;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RunnableFuture;
import java.util.function.Consumer;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.core.io.SimpleVersionedSerialization;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.PrioritizedOperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.RoundRobinOperatorStateRepartitioner;
import org.apache.flink.runtime.checkpoint.StateAssignmentOperation;
import org.apache.flink.runtime.checkpoint.StateObjectCollection;
import org.apache.flink.runtime.checkpoint.SubTaskInitializationMetricsBuilder;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.jobgraph.OperatorInstanceID;
import org.apache.flink.runtime.jobgraph.tasks.TaskOperatorEventGateway;
import org.apache.flink.runtime.operators.coordination.OperatorEvent;
import org.apache.flink.runtime.state.DefaultOperatorStateBackend;
import org.apache.flink.runtime.state.DefaultOperatorStateBackendBuilder;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.TaskStateManager;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OperatorSnapshotFutures;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.SourceOperator;
import org.apache.flink.streaming.api.operators.SimpleOperatorFactory;
import org.apache.flink.streaming.api.operators.SourceOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperatorParameters;
import org.apache.flink.streaming.api.operators.StreamSink;
import org.apache.flink.streaming.runtime.io.DataInputStatus;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OperatorEventDispatcherImpl;
import org.apache.flink.streaming.runtime.tasks.ProcessingTimeService;
import org.apache.flink.streaming.runtime.tasks.SourceOperatorStreamTask;
import org.apache.flink.util.SerializedValue;
import org.apache.flink.util.clock.ManualClock;

/**
 * One attempt of a reader subtask: Flink's {@link SourceOperator}, made by its SourceOperatorFactory
 * from the project's Source, chained to a StreamSink of the project's sink on Flink's
 * TwoPhaseCommitSinkFunction (SourcesSink), in a real SourceOperatorStreamTask over the proxy
 * Environment of AsyncIoTask (with a TaskStateManager restoring each operator's own state of a
 * checkpoint), with the task's own OperatorEventDispatcherImpl between the operator and the
 * coordinator. SourceOperator decides what a new attempt does (restored splits to the reader, then
 * registration: SRC-2), what events do to the reader (SRC-8, SRC-9), what a snapshot stores (its list
 * state "SourceReaderState", SRC-15) and the end of input (SRC-32); TwoPhaseCommitSinkFunction what is
 * committed when. The glue: the task's identity (subtask index, parallelism, attempt: the TaskInfo),
 * the events it sends to the coordinator kept in {@link #outbox} until the harness hands them on, the
 * records of its DataOutput handed to the sink, and a processing-time service whose time never passes
 * (Flink's ManualClock at 0; the periodic watermark timer never fires: no watermarks here).
 */
final class SourcesTask {

    static final int POLL_GUARD = 1_000_000;  // hang guard of one poll

    static final OperatorID SOURCE = new OperatorID(0L, 1L);
    static final OperatorID SINK = new OperatorID(0L, 2L);

    final List<OperatorEvent> outbox = new ArrayList<>();
    final SourceOperator<int[], SourcesSplit> operator;
    final StreamSink<int[]> sink;
    private final OperatorEventDispatcherImpl dispatcher;
    private final PushingAsyncDataInput.DataOutput<int[]> output;

    /**
     * Reader {@code r}'s attempt deployed: its operators created and their states initialized from
     * {@code restored} (per operator, taken at {@code checkpoint}; null: none). The sink's restore
     * commits what the restore point confirms (SRC-29). {@link #open} opens it.
     */
    @SuppressWarnings("unchecked")
    SourcesTask(int r, int parallelism, int attempt, SourcesSource source, Map<OperatorID, OperatorSubtaskState> restored,
            long checkpoint, SourcesSink.External external, Consumer<int[]> onRecord, Consumer<Throwable> onFail)
            throws Exception {
        Environment env = environment(r, parallelism, attempt, restored, checkpoint, onFail);
        SourceOperatorStreamTask<int[]> task = new SourceOperatorStreamTask<>(env);
        StreamConfig config = config(SOURCE, "source");
        TaskOperatorEventGateway toCoordinator = new TaskOperatorEventGateway() {
            @Override
            public void sendOperatorEventToCoordinator(OperatorID operator, SerializedValue<OperatorEvent> event) {
                try {
                    outbox.add(event.deserializeValue(SourcesTask.class.getClassLoader()));
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }

            @Override
            public CompletableFuture<org.apache.flink.runtime.operators.coordination.CoordinationResponse>
                    sendRequestToCoordinator(OperatorID operator,
                            SerializedValue<org.apache.flink.runtime.operators.coordination.CoordinationRequest> r) {
                throw new UnsupportedOperationException("no coordination requests in the sources area");
            }
        };
        dispatcher = new OperatorEventDispatcherImpl(SourcesTask.class.getClassLoader(), toCoordinator);
        ManualClock clock = new ManualClock();  // Flink's; never advanced: no time passes in this area
        ProcessingTimeService time = (ProcessingTimeService) Proxy.newProxyInstance(
                SourcesTask.class.getClassLoader(), new Class<?>[] {ProcessingTimeService.class},
                (p, m, a) -> switch (m.getName()) {
                    case "getCurrentProcessingTime" -> 0L;
                    case "getClock" -> clock;
                    case "quiesce" -> CompletableFuture.completedFuture(null);
                    case "hashCode" -> System.identityHashCode(p);
                    case "equals" -> p == a[0];
                    case "toString" -> "no timers";
                    case "registerTimer", "scheduleAtFixedRate", "scheduleWithFixedDelay" -> new NeverFires();
                    default -> throw new UnsupportedOperationException("no such call in the sources engine: " + m);
                });
        SourceOperatorFactory<int[]> factory = new SourceOperatorFactory<>(source, WatermarkStrategy.noWatermarks());
        factory.setProcessingTimeService(time);
        Output<StreamRecord<int[]>> out = (Output<StreamRecord<int[]>>) AsyncIoTask.proxy(Output.class,
                new AsyncIoTask.Restore(onFail, null, 0L));
        operator = factory.createStreamOperator(new StreamOperatorParameters<>(task, config, out, () -> time,
                dispatcher, null));
        Output<StreamRecord<Object>> none = (Output<StreamRecord<Object>>) AsyncIoTask.proxy(Output.class,
                new AsyncIoTask.Restore(onFail, null, 0L));
        sink = SimpleOperatorFactory.of(new StreamSink<>(new SourcesSink(external, r))).createStreamOperator(
                new StreamOperatorParameters<>(task, config(SINK, "sink"), none, () -> time, dispatcher, null));
        // The chain is initialized from its tail (OperatorChain.initializeStateAndOpenOperators).
        sink.initializeState(task.createStreamTaskStateInitializer(new SubTaskInitializationMetricsBuilder(0L)));
        operator.initializeState(task.createStreamTaskStateInitializer(new SubTaskInitializationMetricsBuilder(0L)));
        output = dataOutput(record -> {
            onRecord.accept(record);
            try {
                sink.processElement(new StreamRecord<>(record));
            } catch (Exception e) {
                throw new IllegalStateException("the sink refused a record", e);
            }
        });
    }

    private static StreamConfig config(OperatorID id, String name) {
        StreamConfig config = new StreamConfig(new org.apache.flink.configuration.Configuration());
        config.setOperatorID(id);
        config.setOperatorName(name);
        config.serializeAllConfigs();
        return config;
    }

    /**
     * AsyncIoTask's proxy Environment, with this attempt's TaskInfo (SourceOperator registers its index)
     * and a TaskStateManager that gives each operator its own restored state, as the JobManager's
     * TaskStateSnapshot does.
     */
    private static Environment environment(int r, int parallelism, int attempt,
            Map<OperatorID, OperatorSubtaskState> restored, long checkpoint, Consumer<Throwable> onFail) {
        Object inner = AsyncIoTask.proxy(Environment.class, new AsyncIoTask.Restore(onFail, null, 0L));
        TaskInfoImpl info = new TaskInfoImpl("sources", 128, r, parallelism, attempt);
        Object states = delegating(TaskStateManager.class, ((Environment) inner).getTaskStateManager(), (m, a) -> {
            if ("prioritizedOperatorState".equals(m.getName())) {
                OperatorSubtaskState state = restored == null ? null : restored.get((OperatorID) a[0]);
                return restored == null ? PrioritizedOperatorSubtaskState.empty(0L)
                        : new PrioritizedOperatorSubtaskState.Builder(state == null ? OperatorSubtaskState.builder()
                                .build() : state, List.of(), checkpoint).build();
            }
            if ("getRestoreCheckpointId".equals(m.getName())) {
                return restored == null ? Optional.empty() : Optional.of(checkpoint);
            }
            return NOT_MINE;
        });
        return (Environment) delegating(Environment.class, inner, (m, a) -> switch (m.getName()) {
            case "getTaskInfo" -> info;
            case "getTaskStateManager" -> states;
            default -> NOT_MINE;
        });
    }

    private static final Object NOT_MINE = new Object();

    /** A proxy of {@code type} answering what {@code mine} answers, the rest by {@code inner}. */
    private static Object delegating(Class<?> type, Object inner,
            java.util.function.BiFunction<Method, Object[], Object> mine) {
        return Proxy.newProxyInstance(SourcesTask.class.getClassLoader(), new Class<?>[] {type}, (p, m, a) -> {
            Object answer = mine.apply(m, a);
            if (answer != NOT_MINE) {
                return answer;
            }
            try {
                return m.invoke(inner, a);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        });
    }

    @SuppressWarnings("unchecked")
    private static PushingAsyncDataInput.DataOutput<int[]> dataOutput(Consumer<int[]> onRecord) {
        return (PushingAsyncDataInput.DataOutput<int[]>) Proxy.newProxyInstance(SourcesTask.class.getClassLoader(),
                new Class<?>[] {PushingAsyncDataInput.DataOutput.class}, (p, m, a) -> switch (m.getName()) {
                    case "emitRecord" -> {
                        onRecord.accept(((StreamRecord<int[]>) a[0]).getValue());
                        yield null;
                    }
                    case "hashCode" -> System.identityHashCode(p);
                    case "equals" -> p == a[0];
                    case "toString" -> "the sink";
                    default -> null;  // no watermarks, statuses, latency markers or attributes here
                });
    }

    /** A timer of a service whose time never passes (SourceOperator's periodic watermark emit). */
    static final class NeverFires extends VirtualTimer {
        @Override
        long delayMs() {
            return Long.MAX_VALUE;
        }
    }

    SourcesReader reader() {
        return (SourcesReader) operator.getSourceReader();
    }

    /** SRC-2: the chain opens from its tail; SourceOperator.open gives the reader its restored splits,
     * then registers it (to the outbox). */
    void open() throws Exception {
        sink.open();
        operator.open();
    }

    /** A notified completion reaches the task's operators (the sink commits, SRC-17). */
    void notifyComplete(long checkpointId) throws Exception {
        operator.notifyCheckpointComplete(checkpointId);
        sink.notifyCheckpointComplete(checkpointId);
    }

    /** SRC-44 (FLIP-147): the end of input finishes the chain; its final checkpoint then completes. */
    void finishWithFinalCheckpoint(long checkpointId) throws Exception {
        operator.finish();
        sink.finish();
        snapshot(checkpointId);
        notifyComplete(checkpointId);
    }

    /** An event from the coordinator, through the task's dispatcher to SourceOperator.handleOperatorEvent. */
    void dispatch(SerializedValue<OperatorEvent> event) throws Exception {
        Method m = OperatorEventDispatcherImpl.class.getDeclaredMethod("dispatchEventToHandlers", OperatorID.class,
                SerializedValue.class);
        m.setAccessible(true);
        try {
            m.invoke(dispatcher, SOURCE, event);
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
    }

    /** The task's input loop: emitNext while Flink says more is available; the last status. */
    DataInputStatus emit(int budget) throws Exception {
        reader().budget = budget;
        DataInputStatus status = operator.emitNext(output);
        for (int i = 0; status == DataInputStatus.MORE_AVAILABLE; i++) {
            if (i == POLL_GUARD) {
                throw new IllegalStateException("sources engine: a poll of reader " + reader().index + " never ends");
            }
            status = operator.emitNext(output);
        }
        return status;
    }

    /** SRC-15: Flink's snapshotState of the source's and the sink's operator state, written to memory. */
    Map<OperatorID, OperatorSubtaskState> snapshot(long checkpointId) throws Exception {
        Map<OperatorID, OperatorSubtaskState> out = new HashMap<>();
        out.put(SOURCE, snapshot(operator, checkpointId, "source"));
        out.put(SINK, snapshot(sink, checkpointId, "sink"));
        return out;
    }

    private OperatorSubtaskState snapshot(AbstractStreamOperator<?> op, long checkpointId, String name)
            throws Exception {
        OperatorSnapshotFutures futures = op.snapshotState(checkpointId, checkpointId,
                CheckpointOptions.forCheckpointWithDefaultLocation(),
                new NamedMemoryStreams("checkpoint " + checkpointId + " reader " + reader().index + " " + name));
        RunnableFuture<SnapshotResult<OperatorStateHandle>> managed = futures.getOperatorStateManagedFuture();
        if (!managed.isDone()) {
            managed.run();
        }
        OperatorStateHandle handle = managed.get().getJobManagerOwnedSnapshot();
        OperatorSubtaskState.Builder state = OperatorSubtaskState.builder();
        if (handle != null) {
            state.setManagedOperatorState(handle);
        }
        return state.build();
    }

    /**
     * SRC-31: the readers' states of a checkpoint taken at {@code oldParallelism}, one per new reader, as
     * the scheduler assigns them: StateAssignmentOperation.reDistributePartitionableStates with
     * RoundRobinOperatorStateRepartitioner (each reader its own at the same parallelism).
     */
    static List<Map<OperatorID, OperatorSubtaskState>> redistribute(
            Map<Integer, Map<OperatorID, OperatorSubtaskState>> old, int oldParallelism, int newParallelism) {
        Map<OperatorID, OperatorState> states = new HashMap<>();
        for (OperatorID id : List.of(SOURCE, SINK)) {
            OperatorState state = new OperatorState(id.toString(), null, id, oldParallelism, 128);
            old.forEach((i, subtask) -> state.putState(i, subtask.get(id)));
            states.put(id, state);
        }
        Map<OperatorInstanceID, List<OperatorStateHandle>> assigned = new HashMap<>();
        StateAssignmentOperation.reDistributePartitionableStates(states, newParallelism,
                OperatorSubtaskState::getManagedOperatorState, RoundRobinOperatorStateRepartitioner.INSTANCE, assigned);
        List<Map<OperatorID, OperatorSubtaskState>> out = new ArrayList<>();
        for (int i = 0; i < newParallelism; i++) {
            Map<OperatorID, OperatorSubtaskState> subtask = new HashMap<>();
            for (OperatorID id : List.of(SOURCE, SINK)) {
                List<OperatorStateHandle> handles = assigned.getOrDefault(OperatorInstanceID.of(i, id), List.of());
                subtask.put(id, OperatorSubtaskState.builder()
                        .setManagedOperatorState(new StateObjectCollection<>(handles)).build());
            }
            out.add(subtask);
        }
        return out;
    }

    /** The splits a snapshot stores, read back through Flink's operator state backend. */
    static List<List<Integer>> stored(OperatorSubtaskState state) throws Exception {
        List<List<Integer>> out = new ArrayList<>();
        for (OperatorStateHandle handle : state.getManagedOperatorState()) {
            DefaultOperatorStateBackend backend = new DefaultOperatorStateBackendBuilder(
                    SourcesTask.class.getClassLoader(), new ExecutionConfig(), false, List.of(handle),
                    new CloseableRegistry()).build();
            ListState<byte[]> list = backend.getListState(new org.apache.flink.api.common.state.ListStateDescriptor<>(
                    "SourceReaderState", org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer.INSTANCE));
            for (byte[] bytes : list.get()) {
                SourcesSplit s = SimpleVersionedSerialization.readVersionAndDeSerialize(
                        new SourcesSource.SplitSerializer(), bytes);
                out.add(List.of(s.id, s.position));
            }
            backend.dispose();
        }
        return out;
    }
}
