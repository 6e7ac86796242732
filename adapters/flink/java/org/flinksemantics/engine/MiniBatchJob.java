package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.RunnableFuture;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.SubTaskInitializationMetricsBuilder;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.memory.MemCheckpointStreamFactory;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.Input;
import org.apache.flink.streaming.api.operators.KeyedProcessOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.operators.OperatorSnapshotFutures;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.SimpleOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperatorParameters;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OneInputStreamTask;
import org.apache.flink.streaming.runtime.tasks.StreamTaskActionExecutor;
import org.apache.flink.streaming.runtime.tasks.mailbox.MailboxExecutorImpl;
import org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailboxImpl;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.keyselector.BinaryRowDataKeySelector;
import org.apache.flink.table.runtime.operators.aggregate.GroupAggFunction;
import org.apache.flink.table.runtime.operators.aggregate.MiniBatchGlobalGroupAggFunction;
import org.apache.flink.table.runtime.operators.aggregate.MiniBatchGroupAggFunction;
import org.apache.flink.table.runtime.operators.aggregate.MiniBatchLocalGroupAggFunction;
import org.apache.flink.table.runtime.operators.bundle.KeyedMapBundleOperator;
import org.apache.flink.table.runtime.operators.bundle.MapBundleOperator;
import org.apache.flink.table.runtime.operators.bundle.trigger.CountBundleTrigger;
import org.apache.flink.table.runtime.operators.wmassigners.ProcTimeMiniBatchAssignerOperator;
import org.apache.flink.table.runtime.operators.wmassigners.RowTimeMiniBatchAssginerOperator;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.types.RowKind;

/**
 * One mini_batch schedule on Flink 2.3.0's operators, as the planner lays out
 * {@code SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) FROM input GROUP BY k} at parallelism 1:
 *
 * <pre>
 * source -&gt; assigner -&gt; [local aggregation] =&gt; exchange (StatusWatermarkValve) -&gt; aggregation -&gt; trace
 * </pre>
 *
 * <ul>
 *   <li>the assigner: {@link ProcTimeMiniBatchAssignerOperator} on {@link ManualTimeService} (MB-4, MB-5)
 *       or {@link RowTimeMiniBatchAssginerOperator} (MB-6, MB-7); none with mini-batch off (MB-1);
 *   <li>the local aggregation (two-phase, MB-3): {@link MapBundleOperator} with
 *       {@link MiniBatchLocalGroupAggFunction} and a {@link CountBundleTrigger} (MB-25);
 *   <li>the exchange: each record copied by its {@link RowDataSerializer} (the network serializes it),
 *       watermarks and statuses through Flink's {@link StatusWatermarkValve} (MB-8);
 *   <li>the aggregation: {@link KeyedMapBundleOperator} with {@link MiniBatchGroupAggFunction}
 *       (one-phase, MB-9..MB-23) or {@link MiniBatchGlobalGroupAggFunction} (MB-26) and a
 *       {@link CountBundleTrigger}; with mini-batch off a {@link KeyedProcessOperator} with
 *       {@link GroupAggFunction} (MB-24), keyed by Flink's {@link BinaryRowDataKeySelector} on
 *       Flink's heap keyed state backend.
 * </ul>
 *
 * Operators are made by Flink's SimpleOperatorFactory in a real task ({@link MiniBatchTask}) and
 * joined by Flink's ChainingOutput (which drops watermarks while it announced idle and repeats no
 * status, MB-15; it stands for the upstream task's RecordWriterOutput too, which does the same).
 * A checkpoint calls prepareSnapshotPreBarrier on the operators in pipeline order (MB-13), then
 * snapshots the aggregation's keyed state (Flink's heap backend to memory); a restore starts a new
 * task whose aggregation restores that state (MB-29).
 */
final class MiniBatchJob {

    static final long TTL_MS = 100L * 365 * 24 * 3600 * 1000;  // idle state retention on: longer than any schedule
    static final OperatorID ASSIGNER_ID = new OperatorID(1, 1);
    static final OperatorID LOCAL_ID = new OperatorID(2, 2);
    static final OperatorID AGG_ID = new OperatorID(3, 3);

    final List<Map<String, Object>> events = new ArrayList<>();
    final ManualTimeService time = new ManualTimeService(0);
    final Map<Long, KeyedStateHandle> checkpoints = new HashMap<>();
    final boolean enabled;
    final long latency;
    final long size;
    final boolean rowtime;
    final boolean updateBefore;
    final boolean ttl;
    final boolean twoPhase;
    final Map<Long, Long> standIns = new HashMap<>();  // two-phase: schedule key -> Flink key (C1)
    final Map<Long, Long> keysOf = new HashMap<>();  // Flink key -> schedule key
    int step = -1;
    boolean alive;

    // the incarnation
    Output<StreamRecord<RowData>> head;
    OneInputStreamOperator<RowData, RowData> assigner;
    MapBundleOperator<RowData, RowData, RowData, RowData> local;
    AbstractStreamOperator<RowData> aggregation;

    MiniBatchJob(Map<String, Object> config) {
        enabled = Boolean.TRUE.equals(config.get("enabled"));
        latency = ((Number) config.getOrDefault("allow_latency", 0)).longValue();
        size = ((Number) config.getOrDefault("size", -1)).longValue();
        rowtime = "rowtime".equals(config.getOrDefault("assigner", "proctime"));
        updateBefore = Boolean.TRUE.equals(config.get("update_before"));
        ttl = Boolean.TRUE.equals(config.get("ttl"));
        twoPhase = enabled && Boolean.TRUE.equals(config.get("two_phase"));  // MB-3
    }

    /**
     * C1: in two-phase aggregation the schedule's keys (in their order of value) run as
     * {@link MiniBatchKeys#STAND_INS}, whose BinaryRowData hashes share one HashMap bucket, where the
     * local bundle's HashMap iterates in insertion order, which is first arrival; the trace names the
     * schedule's keys. Without {@code ownKeys} only: with it, every key runs as itself.
     */
    void useStandIns(List<Long> keys, boolean ownKeys) {
        List<Long> distinct = keys.stream().distinct().sorted().toList();
        if (!twoPhase || ownKeys) {
            return;
        }
        if (distinct.size() > MiniBatchKeys.STAND_INS.length) {
            throw new IllegalArgumentException("a two-phase schedule of " + distinct.size() + " keys: the engine keeps "
                    + "the first-arrival order of " + MiniBatchKeys.STAND_INS.length + " at most (C1, MiniBatchKeys)");
        }
        for (int i = 0; i < distinct.size(); i++) {
            standIns.put(distinct.get(i), MiniBatchKeys.STAND_INS[i]);
            keysOf.put(MiniBatchKeys.STAND_INS[i], distinct.get(i));
        }
    }

    // ---- an incarnation ------------------------------------------------------

    /** Builds and opens the operators, the aggregation restoring {@code restored} (none when null). */
    @SuppressWarnings({"unchecked", "rawtypes"})
    void start(KeyedStateHandle restored, long checkpointId) throws Exception {
        OneInputStreamTask<Object, Object> task = MiniBatchTask.create(AGG_ID, restored, checkpointId);
        long retention = ttl ? TTL_MS : 0;
        Output<StreamRecord<RowData>> sink = MiniBatchTask.chainingOutput(new Trace());
        if (!enabled) {
            aggregation = new KeyedProcessOperator<>(new GroupAggFunction(new MiniBatchAggs.Aggs(0),
                    new MiniBatchAggs.Equaliser(), MiniBatchAggs.ACC_TYPES, MiniBatchAggs.COUNT_STAR_INDEX,
                    updateBefore, retention));
        } else if (twoPhase) {
            aggregation = new KeyedMapBundleOperator(new MiniBatchGlobalGroupAggFunction(new MiniBatchAggs.Aggs(1),
                    new MiniBatchAggs.Aggs(0), new MiniBatchAggs.Equaliser(), MiniBatchAggs.ACC_TYPES,
                    MiniBatchAggs.COUNT_STAR_INDEX, updateBefore, retention), new CountBundleTrigger<>(size));
        } else {
            aggregation = new KeyedMapBundleOperator(new MiniBatchGroupAggFunction(new MiniBatchAggs.Aggs(0),
                    new MiniBatchAggs.Equaliser(), MiniBatchAggs.ACC_TYPES, RowType.of(MiniBatchAggs.INPUT_TYPES),
                    MiniBatchAggs.COUNT_STAR_INDEX, updateBefore, retention), new CountBundleTrigger<>(size));
        }
        LogicalType[] exchanged = twoPhase ? localOutputTypes() : MiniBatchAggs.INPUT_TYPES;
        aggregation = setUp(task, aggregation, "aggregation", AGG_ID, true, sink);
        Output<StreamRecord<RowData>> next = MiniBatchTask.chainingOutput(new Exchange(exchanged));
        if (twoPhase) {
            local = setUp(task, new MapBundleOperator<>(
                    new MiniBatchLocalGroupAggFunction(new MiniBatchAggs.Aggs(0)), new CountBundleTrigger<>(size),
                    keySelector()), "local", LOCAL_ID, false, next);
            next = MiniBatchTask.chainingOutput(local);
        }
        if (enabled) {
            OneInputStreamOperator<RowData, RowData> a = rowtime ? new RowTimeMiniBatchAssginerOperator(latency)
                    : new ProcTimeMiniBatchAssignerOperator(latency);
            assigner = (OneInputStreamOperator<RowData, RowData>) setUp(task, (AbstractStreamOperator<RowData>) a,
                    "assigner", ASSIGNER_ID, false, next);
            next = MiniBatchTask.chainingOutput(assigner);
        }
        head = next;  // the source's output
        alive = true;
    }

    static LogicalType[] localOutputTypes() {
        LogicalType[] types = new LogicalType[1 + MiniBatchAggs.ACC_TYPES.length];
        types[0] = new BigIntType();
        System.arraycopy(MiniBatchAggs.ACC_TYPES, 0, types, 1, MiniBatchAggs.ACC_TYPES.length);
        return types;
    }

    static BinaryRowDataKeySelector keySelector() {
        return new BinaryRowDataKeySelector(InternalTypeInfo.ofFields(new BigIntType()), new MiniBatchAggs.KeyProjection());
    }

    /** Flink's SimpleOperatorFactory sets the operator up in the task; then initializeState and open. */
    <T extends AbstractStreamOperator<RowData>> T setUp(OneInputStreamTask<Object, Object> task, T operator,
            String name, OperatorID id, boolean keyed, Output<StreamRecord<RowData>> output) throws Exception {
        StreamConfig config = new StreamConfig(new Configuration());
        config.setOperatorID(id);
        config.setOperatorName(name);
        if (keyed) {
            config.setStateKeySerializer(InternalTypeInfo.ofFields(new BigIntType()).toRowSerializer());
            config.setStatePartitioner(0, keySelector());
        }
        config.serializeAllConfigs();
        MailboxExecutorImpl executor = new MailboxExecutorImpl(new TaskMailboxImpl(Thread.currentThread()), 0,
                StreamTaskActionExecutor.IMMEDIATE);
        T made = SimpleOperatorFactory.of(operator).createStreamOperator(
                new StreamOperatorParameters<>(task, config, output, () -> time, null, executor));
        made.initializeState(task.createStreamTaskStateInitializer(new SubTaskInitializationMetricsBuilder(0)));
        made.open();
        return made;
    }

    // ---- steps -------------------------------------------------------------------

    void row(long key, String kind, long value) {
        GenericRowData row = GenericRowData.ofKind(kindOf(kind), standIns.getOrDefault(key, key), value);
        head.collect(new StreamRecord<>(row));
    }

    static RowKind kindOf(String shortString) {
        for (RowKind k : RowKind.values()) {
            if (k.shortString().equals(shortString)) {
                return k;
            }
        }
        throw new IllegalArgumentException("not a row kind: " + shortString);
    }

    void watermark(long timestamp) {
        head.emitWatermark(new Watermark(timestamp));
    }

    void status(boolean idle) {
        head.emitWatermarkStatus(idle ? WatermarkStatus.IDLE : WatermarkStatus.ACTIVE);
    }

    /** MB-13: the barrier passes the operators in pipeline order; the aggregation's keyed state is snapshot. */
    void checkpoint(long id) throws Exception {
        if (assigner != null) {
            assigner.prepareSnapshotPreBarrier(id);
        }
        if (local != null) {
            local.prepareSnapshotPreBarrier(id);
        }
        aggregation.prepareSnapshotPreBarrier(id);
        OperatorSnapshotFutures futures = aggregation.snapshotState(id, id,
                CheckpointOptions.forCheckpointWithDefaultLocation(), new MemCheckpointStreamFactory(Integer.MAX_VALUE));
        RunnableFuture<SnapshotResult<KeyedStateHandle>> keyed = futures.getKeyedStateManagedFuture();
        if (!keyed.isDone()) {
            keyed.run();
        }
        checkpoints.put(id, keyed.get().getJobManagerOwnedSnapshot());
    }

    /** The job fails: its timers stop, its bundles are lost (MB-29). */
    void crash() {
        time.quiesce();
        alive = false;
    }

    void restore(Long checkpoint) throws Exception {
        KeyedStateHandle state = checkpoint == null ? null : checkpoints.get(checkpoint);
        start(state, checkpoint == null ? 0 : checkpoint);
    }

    /** End of input: the source's MAX watermark, then every operator finishes in pipeline order (MB-7, MB-14). */
    void end() throws Exception {
        head.emitWatermark(new Watermark(Long.MAX_VALUE));
        if (assigner != null) {
            assigner.finish();
        }
        if (local != null) {
            local.finish();
        }
        aggregation.finish();
    }

    // ---- glue between the operators ---------------------------------------------------

    /** The exchange: records copied by the serializer, watermarks and statuses through Flink's valve. */
    final class Exchange implements Input<RowData>, PushingAsyncDataInput.DataOutput<RowData> {
        final RowDataSerializer serializer;
        final StatusWatermarkValve valve = new StatusWatermarkValve(1);

        Exchange(LogicalType[] types) {
            serializer = new RowDataSerializer(types);
        }

        @Override
        public void processElement(StreamRecord<RowData> r) throws Exception {
            emitRecord(new StreamRecord<>(serializer.copy(r.getValue())));
        }

        @Override
        public void processWatermark(Watermark w) throws Exception {
            valve.inputWatermark(w, 0, this);
        }

        @Override
        public void processWatermarkStatus(WatermarkStatus s) throws Exception {
            valve.inputWatermarkStatus(s, 0, this);
        }

        @Override
        public void processLatencyMarker(LatencyMarker m) {
        }

        @Override
        public void setKeyContextElement(StreamRecord<RowData> r) {
        }

        @Override
        @SuppressWarnings("unchecked")
        public void emitRecord(StreamRecord<RowData> r) throws Exception {
            aggregation.setKeyContextElement1(r);
            ((OneInputStreamOperator<RowData, RowData>) aggregation).processElement(r);
        }

        @Override
        public void emitWatermark(Watermark w) throws Exception {
            aggregation.processWatermark(w);
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) throws Exception {
            aggregation.processWatermarkStatus(s);
        }

        @Override
        public void emitLatencyMarker(LatencyMarker m) {
        }

        @Override
        public void emitRecordAttributes(RecordAttributes a) {
        }

        @Override
        public void emitWatermark(WatermarkEvent e) {
        }
    }

    /** The aggregation's downstream: its changelog rows, watermarks and statuses as the trace's events. */
    final class Trace implements Input<RowData> {
        @Override
        public void processElement(StreamRecord<RowData> r) {
            RowData row = r.getValue();
            events.add(AreaEngine.event(step, "out", "key", keysOf.getOrDefault(row.getLong(0), row.getLong(0)), "change", row.getRowKind().shortString(),
                    "count", row.getLong(1), "sum", row.getLong(2), "min", row.isNullAt(3) ? null : row.getLong(3),
                    "max", row.isNullAt(4) ? null : row.getLong(4)));
        }

        @Override
        public void processWatermark(Watermark w) {
            events.add(AreaEngine.event(step, "watermark", "timestamp", w.getTimestamp()));
        }

        @Override
        public void processWatermarkStatus(WatermarkStatus s) {
            events.add(AreaEngine.event(step, "status", "idle", s.isIdle()));
        }

        @Override
        public void processLatencyMarker(LatencyMarker m) {
        }

        @Override
        public void setKeyContextElement(StreamRecord<RowData> r) {
        }
    }
}
