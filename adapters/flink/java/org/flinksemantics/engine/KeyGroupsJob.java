package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.RunnableFuture;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.state.BroadcastState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.api.java.typeutils.runtime.RowSerializer;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.RoundRobinOperatorStateRepartitioner;
import org.apache.flink.runtime.checkpoint.StateAssignmentOperation;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.jobgraph.OperatorInstanceID;
import org.apache.flink.runtime.query.KvStateRegistry;
import org.apache.flink.runtime.state.DefaultOperatorStateBackend;
import org.apache.flink.runtime.state.DefaultOperatorStateBackendBuilder;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.LocalRecoveryConfig;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.StateObject;
import org.apache.flink.runtime.state.UncompressedStreamCompressionDecorator;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.heap.HeapKeyedStateBackend;
import org.apache.flink.runtime.state.heap.HeapKeyedStateBackendBuilder;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSetFactory;
import org.apache.flink.runtime.state.metrics.LatencyTrackingStateConfig;
import org.apache.flink.runtime.state.metrics.SizeTrackingStateConfig;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;

/**
 * The running job of a key groups schedule: per subtask, Flink's heap keyed state backend
 * ({@link HeapKeyedStateBackend}, one per key type, as a backend has one key serializer) holding a
 * value state "sum" per key, and Flink's {@link DefaultOperatorStateBackend} holding the operator
 * list states. A checkpoint is the backends' own snapshots (to memory, {@link NamedMemoryStreams}:
 * MemCheckpointStreamFactory with handles named by checkpoint, operator and subtask) gathered in
 * {@link OperatorState}s as the checkpoint coordinator gathers them; a restore hands them to new
 * backends as {@link StateAssignmentOperation} assigns them (KG-13, KG-14) and {@link RoundRobinOperatorStateRepartitioner} repartitions them
 * (KG-17..KG-21). Backends are built when a subtask first needs one (a job may have 32768 subtasks).
 */
final class KeyGroupsJob {

    static final String SUM = "sum";
    static final ValueStateDescriptor<Long> SUM_STATE = new ValueStateDescriptor<>(SUM, LongSerializer.INSTANCE);
    static final List<String> TYPES = List.of("int", "long", "string");

    /** A checkpoint: the keyed state per key type and the operator state, as Flink's checkpoint holds them. */
    record Checkpoint(int parallelism, int maxParallelism, Map<String, OperatorState> keyed,
                      OperatorState operator, Map<String, String> modes) {}

    final int parallelism;
    final int maxParallelism;
    final boolean pyflinkKeys;
    final Map<String, String> modes;  // operator state name -> split, union or broadcast
    private final List<Map<String, HeapKeyedStateBackend<Object>>> keyed = new ArrayList<>();
    private final List<DefaultOperatorStateBackend> operator = new ArrayList<>();
    private final List<KeyGroupRange> ranges;  // per subtask (KG-4)

    KeyGroupsJob(int parallelism, int maxParallelism, boolean pyflinkKeys, Map<String, String> modes) {
        this.parallelism = parallelism;
        this.maxParallelism = maxParallelism;
        this.pyflinkKeys = pyflinkKeys;
        this.modes = new TreeMap<>(modes);
        this.ranges = StateAssignmentOperation.createKeyGroupPartitions(maxParallelism, parallelism);
        for (int i = 0; i < parallelism; i++) {
            keyed.add(new HashMap<>());
            operator.add(null);
        }
    }

    KeyGroupRange range(int subtask) {
        return ranges.get(subtask);
    }

    // ------------------------------------------------------------------ keyed state

    /** The key's serializer: the key type's, or, for PyFlink's keys (KG-33), a one-field Row's. */
    @SuppressWarnings("unchecked")
    TypeSerializer<Object> keySerializer(String type) {
        TypeSerializer<?> field = switch (type) {
            case "int" -> IntSerializer.INSTANCE;
            case "long" -> LongSerializer.INSTANCE;
            default -> StringSerializer.INSTANCE;
        };
        return (TypeSerializer<Object>) (pyflinkKeys ? new RowSerializer(new TypeSerializer<?>[] {field}) : field);
    }

    HeapKeyedStateBackend<Object> keyedBackend(int subtask, String type, Collection<KeyedStateHandle> restore)
            throws Exception {
        HeapKeyedStateBackend<Object> backend = keyed.get(subtask).get(type);
        if (backend == null) {
            KeyGroupRange range = range(subtask);
            backend = new HeapKeyedStateBackendBuilder<>(
                    new KvStateRegistry().createTaskRegistry(new JobID(), new JobVertexID()), keySerializer(type),
                    KeyGroupsJob.class.getClassLoader(), maxParallelism, range, new ExecutionConfig(),
                    TtlTimeProvider.DEFAULT, LatencyTrackingStateConfig.disabled(), SizeTrackingStateConfig.disabled(),
                    restore, UncompressedStreamCompressionDecorator.INSTANCE,
                    LocalRecoveryConfig.BACKUP_AND_RECOVERY_DISABLED,
                    new HeapPriorityQueueSetFactory(range, maxParallelism, 128), false, new CloseableRegistry())
                    .build();
            keyed.get(subtask).put(type, backend);
        }
        return backend;
    }

    /** The key's sum state on the subtask's backend, with the key as the backend's current key. */
    ValueState<Long> sum(int subtask, String type, Object key) throws Exception {
        HeapKeyedStateBackend<Object> backend = keyedBackend(subtask, type, List.of());
        backend.setCurrentKey(key);  // the backend computes the key group and refuses one outside its range
        return backend.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, SUM_STATE);
    }

    /** Every key of the subtask's backend of that type and its sum (none when it has no backend). */
    Map<Object, Long> sums(int subtask, String type) throws Exception {
        HeapKeyedStateBackend<Object> backend = keyed.get(subtask).get(type);
        Map<Object, Long> out = new HashMap<>();
        if (backend == null || !backend.getKeys(List.of(SUM), VoidNamespace.INSTANCE).findAny().isPresent()) {
            return out;
        }
        List<Object> keys = backend.getKeys(SUM, VoidNamespace.INSTANCE).toList();
        for (Object key : keys) {
            out.put(key, sum(subtask, type, key).value());
        }
        return out;
    }

    // ------------------------------------------------------------------ operator state

    DefaultOperatorStateBackend operatorBackend(int subtask, Collection<OperatorStateHandle> restore) throws Exception {
        DefaultOperatorStateBackend backend = operator.get(subtask);
        if (backend == null) {
            backend = new DefaultOperatorStateBackendBuilder(KeyGroupsJob.class.getClassLoader(), new ExecutionConfig(),
                    false, restore, new CloseableRegistry()).build();
            operator.set(subtask, backend);
        }
        return backend;
    }

    static MapStateDescriptor<Integer, Long> broadcast(String name) {
        return new MapStateDescriptor<>(name, IntSerializer.INSTANCE, LongSerializer.INSTANCE);
    }

    /** The subtask's list `name`, registered in its mode if it was not (getListState, getUnionListState). */
    static org.apache.flink.api.common.state.ListState<Long> list(DefaultOperatorStateBackend backend, String name,
            String mode) throws Exception {
        ListStateDescriptor<Long> descriptor = new ListStateDescriptor<>(name, LongSerializer.INSTANCE);
        return mode.equals("split") ? backend.getListState(descriptor) : backend.getUnionListState(descriptor);
    }

    /** Appends to the subtask's list `name` in its mode (a broadcast list: position -> element in
     * Flink's broadcast state, a map). */
    void add(int subtask, String name, String mode, long element) throws Exception {
        modes.putIfAbsent(name, mode);
        DefaultOperatorStateBackend backend = operatorBackend(subtask, List.of());
        if (mode.equals("broadcast")) {
            BroadcastState<Integer, Long> state = backend.getBroadcastState(broadcast(name));
            int size = 0;
            for (Map.Entry<Integer, Long> ignored : state.entries()) {
                size++;
            }
            state.put(size, element);
        } else {
            list(backend, name, mode).add(element);
        }
    }

    /**
     * Registers every state name on every subtask, as an operator's initializeState does on each
     * subtask (C4): Flink's repartitioner takes a broadcast state that some subtasks' snapshots lack
     * for a partly finished one and deals the present copies out again even at the same parallelism
     * (RoundRobinOperatorStateRepartitioner.collectPartlyFinishedBroadcastStates).
     */
    void registerEverywhere() throws Exception {
        if (modes.isEmpty()) {
            return;
        }
        for (int i = 0; i < parallelism; i++) {
            DefaultOperatorStateBackend backend = operatorBackend(i, List.of());
            for (Map.Entry<String, String> e : modes.entrySet()) {
                if (e.getValue().equals("broadcast")) {
                    backend.getBroadcastState(broadcast(e.getKey()));
                } else {
                    list(backend, e.getKey(), e.getValue());
                }
            }
        }
    }

    /** The subtask's list `name` as its backend holds it (empty without a backend: C4). */
    List<Long> elements(int subtask, String name) throws Exception {
        DefaultOperatorStateBackend backend = operator.get(subtask);
        List<Long> out = new ArrayList<>();
        if (backend == null) {
            return out;
        }
        String mode = modes.get(name);
        if (mode.equals("broadcast")) {
            for (Map.Entry<Integer, Long> e : backend.getBroadcastState(broadcast(name)).entries()) {
                out.add(e.getValue());
            }
            return out;
        }
        list(backend, name, mode).get().forEach(out::add);
        return out;
    }

    // ------------------------------------------------------------------ checkpoint and restore

    static <T extends StateObject> T done(RunnableFuture<SnapshotResult<T>> snapshot) throws Exception {
        if (!snapshot.isDone()) {
            snapshot.run();
        }
        return snapshot.get().getJobManagerOwnedSnapshot();
    }

    /** Every backend's snapshot, gathered per operator as the checkpoint coordinator does. */
    Checkpoint checkpoint(long id) throws Exception {
        registerEverywhere();
        CheckpointOptions options = CheckpointOptions.forCheckpointWithDefaultLocation();
        Map<String, OperatorState> keyedStates = new TreeMap<>();
        for (String type : TYPES) {
            OperatorState state = new OperatorState("keyed " + type, null, new OperatorID(), parallelism,
                    maxParallelism);
            for (int i = 0; i < parallelism; i++) {
                HeapKeyedStateBackend<Object> backend = keyed.get(i).get(type);
                NamedMemoryStreams streams = new NamedMemoryStreams("checkpoint " + id + "/keyed " + type + "/" + i);
                KeyedStateHandle handle = backend == null ? null : done(backend.snapshot(id, id, streams, options));
                if (handle != null) {
                    state.putState(i, OperatorSubtaskState.builder().setManagedKeyedState(handle).build());
                }
            }
            keyedStates.put(type, state);
        }
        OperatorState operatorState = new OperatorState("operator", null, new OperatorID(), parallelism,
                maxParallelism);
        for (int i = 0; i < parallelism; i++) {
            DefaultOperatorStateBackend backend = operator.get(i);
            NamedMemoryStreams streams = new NamedMemoryStreams("checkpoint " + id + "/operator/" + i);
            OperatorStateHandle handle = backend == null ? null : done(backend.snapshot(id, id, streams, options));
            if (handle != null) {
                operatorState.putState(i, OperatorSubtaskState.builder().setManagedOperatorState(handle).build());
            }
        }
        return new Checkpoint(parallelism, maxParallelism, keyedStates, operatorState, new TreeMap<>(modes));
    }

    /**
     * The new job's state from a checkpoint: keyed handles as StateAssignmentOperation assigns them
     * (reAssignSubKeyedStates: the old subtask's own handles at the same parallelism, KG-14; else
     * getManagedKeyedStateHandles, the handles intersecting the new range, KG-13), operator handles by
     * reDistributePartitionableStates with RoundRobinOperatorStateRepartitioner (KG-17..KG-21), each
     * given to a new backend of the subtask as Flink's backend builders restore them.
     */
    void restore(Checkpoint c) throws Exception {
        for (Map.Entry<String, OperatorState> e : c.keyed().entrySet()) {
            OperatorState state = e.getValue();
            if (state.getSubtaskStates().isEmpty()) {
                continue;
            }
            for (int i = 0; i < parallelism; i++) {
                List<KeyedStateHandle> handles;
                if (parallelism == c.parallelism()) {
                    OperatorSubtaskState old = state.getState(i);
                    handles = old == null ? List.of() : old.getManagedKeyedState().asList();
                } else {
                    handles = StateAssignmentOperation.getManagedKeyedStateHandles(state, range(i));
                }
                if (!handles.isEmpty()) {
                    keyedBackend(i, e.getKey(), handles);
                }
            }
        }
        OperatorID id = c.operator().getOperatorID();
        Map<OperatorInstanceID, List<OperatorStateHandle>> assigned = new HashMap<>();
        StateAssignmentOperation.reDistributePartitionableStates(Map.of(id, c.operator()), parallelism,
                OperatorSubtaskState::getManagedOperatorState, RoundRobinOperatorStateRepartitioner.INSTANCE,
                assigned);
        for (int i = 0; i < parallelism; i++) {
            List<OperatorStateHandle> handles = assigned.getOrDefault(OperatorInstanceID.of(i, id), List.of());
            if (!handles.isEmpty()) {
                operatorBackend(i, handles);
            }
        }
    }

    /** Disposes of every backend (the job stops). */
    void stop() {
        for (Map<String, HeapKeyedStateBackend<Object>> backends : keyed) {
            backends.values().forEach(HeapKeyedStateBackend::dispose);
        }
        for (DefaultOperatorStateBackend backend : operator) {
            if (backend != null) {
                backend.dispose();
            }
        }
    }
}
