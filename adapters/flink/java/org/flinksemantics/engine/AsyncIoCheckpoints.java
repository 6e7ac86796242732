package org.flinksemantics.engine;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.RunnableFuture;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.state.DefaultOperatorStateBackend;
import org.apache.flink.runtime.state.DefaultOperatorStateBackendBuilder;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.streaming.api.operators.OperatorSnapshotFutures;
import org.apache.flink.streaming.api.operators.async.AsyncWaitOperator;
import org.apache.flink.streaming.api.operators.async.queue.StreamElementQueueEntry;
import org.apache.flink.streaming.api.operators.async.queue.UnorderedStreamElementQueue;
import org.apache.flink.streaming.runtime.streamrecord.StreamElement;
import org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

/**
 * Checkpoints of the async_io engine (AIO-41, AIO-44..AIO-49, AIO-55): a barrier taken from the input
 * calls Flink's AbstractStreamOperator.snapshotState (AsyncWaitOperator.snapshotState writes the queue's
 * input elements into its operator list state "_async_wait_operator_state_"), the operator state
 * backend's snapshot is written to memory ({@link NamedMemoryStreams}) and kept as the checkpoint's
 * OperatorSubtaskState, which a restore hands to the new task's TaskStateManager ({@link AsyncIoTask}).
 * The checkpoint event lists the elements read back from that snapshot by a fresh
 * DefaultOperatorStateBackend restored from it, in their stored order.
 *
 * <p>Two orders Flink 2.3.0 leaves to hash sets are pinned here, as the spec pins them (glue that picks
 * one of Flink's possible orders, by reflection on the operator's private fields): D1, the incomplete
 * records of an unordered segment (UnorderedStreamElementQueue.Segment.incompleteElements, a HashSet)
 * are put in admission order before a snapshot; D2, the pending retries that end of input fires
 * (AsyncWaitOperator.inFlightDelayRetryHandlers, a HashSet) are put in admission order before endInput.
 */
final class AsyncIoCheckpoints {

    static final String STATE = "_async_wait_operator_state_";

    private AsyncIoCheckpoints() {
    }

    /** AIO-44, AIO-45: snapshot at the barrier of checkpoint {@code id}. */
    static void take(AsyncIoIncarnation job, long id) throws Exception {
        orderSegments(job);
        OperatorSnapshotFutures futures = job.operator.snapshotState(id, id,
                CheckpointOptions.forCheckpointWithDefaultLocation(), new NamedMemoryStreams("checkpoint " + id));
        RunnableFuture<SnapshotResult<OperatorStateHandle>> managed = futures.getOperatorStateManagedFuture();
        if (!managed.isDone()) {
            managed.run();
        }
        OperatorStateHandle handle = managed.get().getJobManagerOwnedSnapshot();
        OperatorSubtaskState.Builder state = OperatorSubtaskState.builder();
        if (handle != null) {
            state.setManagedOperatorState(handle);
        }
        job.run.checkpoints.put(id, state.build());
        job.event("checkpoint", "id", id, "snapshot", stored(handle));
    }

    /** The elements a snapshot stores, read back through Flink's operator state backend. */
    static List<Map<String, Object>> stored(OperatorStateHandle handle) throws Exception {
        List<Map<String, Object>> out = new ArrayList<>();
        if (handle == null) {
            return out;
        }
        DefaultOperatorStateBackend backend = new DefaultOperatorStateBackendBuilder(
                AsyncIoCheckpoints.class.getClassLoader(), new ExecutionConfig(), false, List.of(handle),
                new CloseableRegistry()).build();
        ListState<StreamElement> list = backend.getListState(
                new ListStateDescriptor<>(STATE, new StreamElementSerializer<>(IntSerializer.INSTANCE)));
        for (StreamElement e : list.get()) {
            if (e.isRecord()) {
                out.add(Map.of("record", e.<Integer>asRecord().getValue()));
            } else {
                out.add(Map.of("watermark", e.asWatermark().getTimestamp()));
            }
        }
        backend.dispose();
        return out;
    }

    static Object read(Object target, Class<?> type, String name) throws Exception {
        Field f = type.getDeclaredField(name);
        f.setAccessible(true);
        return f.get(target);
    }

    static void write(Object target, Class<?> type, String name, Object value) throws Exception {
        Field f = type.getDeclaredField(name);
        f.setAccessible(true);
        f.set(target, value);
    }

    /** D1 (AIO-55): each unordered segment's incomplete records in admission order. */
    @SuppressWarnings("unchecked")
    static void orderSegments(AsyncIoIncarnation job) throws Exception {
        Object queue = read(job.operator, AsyncWaitOperator.class, "queue");
        if (!(queue instanceof UnorderedStreamElementQueue)) {
            return;
        }
        Class<?> segment = Class.forName(UnorderedStreamElementQueue.class.getName() + "$Segment");
        for (Object s : (Iterable<Object>) read(queue, UnorderedStreamElementQueue.class, "segments")) {
            Set<StreamElementQueueEntry<?>> incomplete =
                    (Set<StreamElementQueueEntry<?>>) read(s, segment, "incompleteElements");
            List<StreamElementQueueEntry<?>> sorted = new ArrayList<>(incomplete);
            sorted.sort(Comparator.comparing(e -> job.admissions.get(
                    ((StreamRecord<Integer>) e.getInputElement()).getValue())));
            write(s, segment, "incompleteElements", new LinkedHashSet<>(sorted));
        }
    }

    /** D2 (AIO-39): the retries end of input fires, in admission order. */
    @SuppressWarnings("unchecked")
    static void orderRetries(AsyncIoIncarnation job) throws Exception {
        Set<Object> pending = (Set<Object>) read(job.operator, AsyncWaitOperator.class, "inFlightDelayRetryHandlers");
        if (pending == null) {
            return;
        }
        Class<?> delegator = Class.forName(AsyncWaitOperator.class.getName() + "$RetryableResultHandlerDelegator");
        Class<?> handler = Class.forName(AsyncWaitOperator.class.getName() + "$ResultHandler");
        List<Object> sorted = new ArrayList<>(pending);
        List<Long> keys = new ArrayList<>();
        for (Object d : sorted) {
            StreamRecord<Integer> r = (StreamRecord<Integer>) read(read(d, delegator, "resultHandler"), handler,
                    "inputRecord");
            keys.add(job.admissions.get(r.getValue()));
        }
        List<Integer> index = new ArrayList<>();
        for (int i = 0; i < sorted.size(); i++) {
            index.add(i);
        }
        index.sort(Comparator.comparing(keys::get));
        Set<Object> ordered = new LinkedHashSet<>();
        for (int i : index) {
            ordered.add(sorted.get(i));
        }
        write(job.operator, AsyncWaitOperator.class, "inFlightDelayRetryHandlers", ordered);
    }
}
