package org.flinksemantics.engine;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.runtime.checkpoint.SubTaskInitializationMetricsBuilder;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.jobgraph.tasks.TaskOperatorEventGateway;
import org.apache.flink.runtime.operators.coordination.OperatorEvent;
import org.apache.flink.runtime.source.event.AddSplitEvent;
import org.apache.flink.runtime.source.event.WatermarkAlignmentEvent;
import org.apache.flink.runtime.taskmanager.TaskManagerRuntimeInfo;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.SourceOperator;
import org.apache.flink.streaming.api.operators.SourceOperatorFactory;
import org.apache.flink.streaming.api.operators.StreamOperatorParameters;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.io.DataInputStatus;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OperatorEventDispatcherImpl;
import org.apache.flink.streaming.runtime.tasks.ProcessingTimeService;
import org.apache.flink.streaming.runtime.tasks.SourceOperatorStreamTask;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.util.SerializedValue;

/**
 * An alignment schedule of the watermarks area (WM-14, WM-22..WM-26) on Flink 2.3.0's classes: each
 * reader is Flink's {@link SourceOperator} (from SourceOperatorFactory, with the schedule's
 * WatermarkStrategy and {@code withWatermarkAlignment}, and {@code pipeline.watermark-alignment.buffer-size})
 * in a SourceOperatorStreamTask over AsyncIoTask's proxy Environment, its timers on the schedule's
 * clock ({@link ManualTimeService}); the coordinator is Flink's SourceCoordinator
 * ({@link WatermarksCoordinator}); what the readers send goes to Flink's {@link StatusWatermarkValve}.
 * SourceOperator decides when a reader reports, blocks (WM-25) and pauses splits (WM-26); the
 * coordinator what it announces (WM-23, WM-24). Glue: the project's source (WatermarksSource), splits
 * added as the AddSplitEvent SourceOperator handles, the events between the operators and the
 * coordinator handed on by this class in reader order (C3, C4), an `align` step firing each reader's
 * update-interval timer (SourceOperator's sampleAndEmitLatestWatermark) and then the coordinator's
 * (C4), `blocked`/`unblocked` read from SourceOperator's waitingForAlignmentFuture just before the
 * reader's next event and after each call, and at `end` (C5) a WatermarkAlignmentEvent of MAX to
 * every reader, whose trace events are not the schedule's, so that what waits is read.
 */
final class WatermarksAligned implements WatermarksSource.Events, AutoCloseable {

    /** The update interval of alignment: the timers of this period are the `align` steps' (C4). */
    static final long UPDATE_MS = 86_400_007L;

    static final OperatorID SOURCE = new OperatorID(0L, 1L);

    final List<Map<String, Object>> events = new ArrayList<>();
    private final int readerCount;
    private final WatermarkStrategy<Long> strategy;
    private final long interval;
    private final int buffer;
    private final ManualTimeService time = new ManualTimeService();
    private final Map<Integer, Integer> owner = new HashMap<>();  // split -> reader
    private final WatermarksSource source = new WatermarksSource(this);
    private List<Task> tasks;
    private WatermarksCoordinator coordinator;
    private StatusWatermarkValve valve;
    private boolean quiet;  // C5: the alignment events of `end` are not the schedule's
    private int step;

    WatermarksAligned(int readers, WatermarkStrategy<Long> base, long maxDrift, long interval, int buffer)
            throws Exception {
        this.readerCount = readers;
        this.strategy = base.withWatermarkAlignment("watermarks", Duration.ofMillis(maxDrift),
                Duration.ofMillis(UPDATE_MS));
        this.interval = interval;
        this.buffer = buffer;
        start();
    }

    /** A fresh job (WM-16): the coordinator, then each reader's task opened and registered, in order. */
    private void start() throws Exception {
        valve = new StatusWatermarkValve(readerCount);
        coordinator = new WatermarksCoordinator(readerCount, source, strategy.getAlignmentParameters());
        tasks = new ArrayList<>();
        for (int r = 0; r < readerCount; r++) {
            Task task = new Task(r);
            tasks.add(task);
            task.open();
        }
    }

    private void emit(String kind, Object... fields) {
        events.add(AreaEngine.event(step, kind, fields));
    }

    @Override
    public void paused(int reader, String split) {
        tasks.get(reader).flush();
        if (!quiet) {
            emit("paused", "split", Integer.parseInt(split.substring(1)));
        }
    }

    @Override
    public void resumed(int reader, String split) {
        tasks.get(reader).flush();
        if (!quiet) {
            emit("resumed", "split", Integer.parseInt(split.substring(1)));
        }
    }

    @Override
    public void finished(int reader, String split) {
        emit("split_finished", "split", Integer.parseInt(split.substring(1)));
    }

    void step(int index, Map<String, Object> s) throws Exception {
        step = index;
        switch ((String) s.get("op")) {
            case "add_split" -> {
                int r = ((Number) s.get("reader")).intValue();
                int split = ((Number) s.get("split")).intValue();
                owner.put(split, r);
                tasks.get(r).add(split);
            }
            case "record", "finish_split" -> {
                int split = ((Number) s.get("split")).intValue();
                boolean end = "finish_split".equals(s.get("op"));
                long ts = end ? 0L : ((Number) s.get("ts")).longValue();
                Task task = tasks.get(owner.get(split));
                task.reader().available.add(new WatermarksSource.Reader.Item("s" + split, ts, end));
                task.read();
            }
            case "tick" -> {
                time.advance(((Number) s.get("ms")).longValue());
                for (Task task : tasks) {
                    task.flush();
                }
            }
            case "align" -> align();
            case "failover" -> failover();
            case "end" -> end();
            default -> throw new IllegalArgumentException("not a watermarks step driven here: " + s);
        }
    }

    /** C4: each reader's update-interval timer, in order; then the coordinator's announcement. */
    private void align() throws Exception {
        for (Task task : tasks) {
            task.alignTimer.onProcessingTime(time.getCurrentProcessingTime());
            task.flush();
            task.read();
            task.forward();
        }
        coordinator.announce();
        boolean announced = false;
        for (Task task : tasks) {
            for (OperatorEvent e : coordinator.take(task.index)) {
                if (e instanceof WatermarkAlignmentEvent w && !announced) {
                    emit("max_allowed", "value", w.getMaxWatermark());
                    announced = true;
                }
                task.deliver(e);
            }
        }
    }

    /** WM-16: the job restarts with the splits each reader had, registered at once, what was unread kept. */
    private void failover() throws Exception {
        List<List<String>> splits = new ArrayList<>();
        List<List<WatermarksSource.Reader.Item>> held = new ArrayList<>();
        for (Task task : tasks) {
            splits.add(new ArrayList<>(task.reader().splits));
            held.add(new ArrayList<>(task.reader().available));
            task.operator.finish();
        }
        coordinator.close();
        emit("restarted");
        start();
        for (int r = 0; r < readerCount; r++) {
            for (String split : splits.get(r)) {
                tasks.get(r).add(Integer.parseInt(split.substring(1)));
            }
        }
        for (Task task : tasks) {  // what was available and unread is read by the new attempt
            task.reader().available.addAll(held.get(task.index));
            task.read();
        }
    }

    /** C5, WM-15 (D2 as in WatermarksEngine.Job.end): what waits is read, every split finishes, then MAX. */
    private void end() throws Exception {
        quiet = true;
        for (Task task : tasks) {
            task.reader().ending = true;
            task.operator.handleOperatorEvent(new WatermarkAlignmentEvent(Watermark.MAX_WATERMARK.getTimestamp()));
            task.blocked = task.waiting();
        }
        quiet = false;
        for (Task task : tasks) {
            task.read();
        }
        for (Task task : tasks) {
            for (String split : new ArrayList<>(task.reader().splits)) {
                task.reader().finish(split);
            }
        }
        for (Task task : tasks) {
            task.operator.finish();
            if (!task.idle) {
                task.out.emitWatermark(Watermark.MAX_WATERMARK);
            }
        }
    }

    /** The coordinator's threads end. */
    @Override
    public void close() throws Exception {
        coordinator.close();
    }

    /** One reader: Flink's SourceOperator in a SourceOperatorStreamTask. */
    final class Task {
        final int index;
        final SourceOperator<Long, WatermarksSource.Split> operator;
        final List<OperatorEvent> outbox = new ArrayList<>();
        ProcessingTimeCallback alignTimer;
        boolean blocked;  // as last told in the trace
        boolean idle;  // the last status this reader sent
        final PushingAsyncDataInput.DataOutput<Object> out;

        @SuppressWarnings("unchecked")
        Task(int r) throws Exception {
            this.index = r;
            Environment env = environment(r);
            SourceOperatorStreamTask<Long> task = new SourceOperatorStreamTask<>(env);
            TaskOperatorEventGateway toCoordinator = new TaskOperatorEventGateway() {
                @Override
                public void sendOperatorEventToCoordinator(OperatorID op, SerializedValue<OperatorEvent> event) {
                    try {
                        outbox.add(event.deserializeValue(WatermarksAligned.class.getClassLoader()));
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }

                @Override
                public CompletableFuture<org.apache.flink.runtime.operators.coordination.CoordinationResponse>
                        sendRequestToCoordinator(OperatorID op,
                                SerializedValue<org.apache.flink.runtime.operators.coordination.CoordinationRequest> q) {
                    throw new UnsupportedOperationException("no coordination requests in the watermarks area");
                }
            };
            OperatorEventDispatcherImpl dispatcher = new OperatorEventDispatcherImpl(
                    WatermarksAligned.class.getClassLoader(), toCoordinator);
            ProcessingTimeService timers = timers();
            SourceOperatorFactory<Long> factory = new SourceOperatorFactory<>(source, strategy);
            factory.setProcessingTimeService(timers);
            Output<StreamRecord<Long>> none = (Output<StreamRecord<Long>>) AsyncIoTask.proxy(Output.class,
                    new AsyncIoTask.Restore(t -> { throw new IllegalStateException(t); }, null, 0L));
            StreamConfig config = new StreamConfig(new Configuration());
            config.setOperatorID(SOURCE);
            config.setOperatorName("source");
            config.serializeAllConfigs();
            operator = factory.createStreamOperator(new StreamOperatorParameters<>(task, config, none, () -> timers,
                    dispatcher, null));
            operator.initializeState(task.createStreamTaskStateInitializer(new SubTaskInitializationMetricsBuilder(0L)));
            out = output();
        }

        /** The task's processing time: the schedule's clock; the update-interval timer kept for `align`. */
        private ProcessingTimeService timers() {
            return (ProcessingTimeService) Proxy.newProxyInstance(WatermarksAligned.class.getClassLoader(),
                    new Class<?>[] {ProcessingTimeService.class}, (p, m, a) -> {
                        if ("scheduleWithFixedDelay".equals(m.getName()) && (Long) a[2] == UPDATE_MS) {
                            alignTimer = (ProcessingTimeCallback) a[0];
                            return new SourcesTask.NeverFires();
                        }
                        switch (m.getName()) {
                            case "hashCode":
                                return System.identityHashCode(p);
                            case "equals":
                                return p == a[0];
                            case "toString":
                                return "the schedule's clock";
                            default:
                                try {
                                    return m.invoke(time, a);
                                } catch (InvocationTargetException e) {
                                    throw e.getCause();
                                }
                        }
                    });
        }

        /** AsyncIoTask's Environment with this reader's TaskInfo, interval and alignment buffer. */
        private Environment environment(int r) {
            Environment inner = (Environment) AsyncIoTask.proxy(Environment.class,
                    new AsyncIoTask.Restore(t -> { throw new IllegalStateException(t); }, null, 0L));
            TaskInfoImpl info = new TaskInfoImpl("watermarks", 128, r, readerCount, 0);
            ExecutionConfig execution = new ExecutionConfig();
            execution.setAutoWatermarkInterval(interval);
            Configuration conf = new Configuration();
            conf.set(PipelineOptions.WATERMARK_ALIGNMENT_BUFFER_SIZE, buffer);
            TaskManagerRuntimeInfo tm = (TaskManagerRuntimeInfo) Proxy.newProxyInstance(
                    WatermarksAligned.class.getClassLoader(), new Class<?>[] {TaskManagerRuntimeInfo.class},
                    (p, m, a) -> "getConfiguration".equals(m.getName()) ? conf
                            : m.invoke(inner.getTaskManagerInfo(), a));
            return (Environment) Proxy.newProxyInstance(WatermarksAligned.class.getClassLoader(),
                    new Class<?>[] {Environment.class}, (p, m, a) -> switch (m.getName()) {
                        case "getTaskInfo" -> info;
                        case "getExecutionConfig" -> execution;
                        case "getTaskManagerInfo" -> tm;
                        default -> {
                            try {
                                yield m.invoke(inner, a);
                            } catch (InvocationTargetException e) {
                                throw e.getCause();
                            }
                        }
                    });
        }

        /** What the reader sends downstream: to the trace and to channel `index` of the valve. */
        private PushingAsyncDataInput.DataOutput<Object> output() {
            return new WatermarksEngine.Capture() {
                @Override
                public void emitRecord(StreamRecord<Object> rec) {
                    flush();
                    emit("record", "split", Integer.parseInt(reader().reading.substring(1)), "ts", rec.getTimestamp());
                }

                @Override
                public void emitWatermark(Watermark w) {
                    flush();
                    emit("watermark", "reader", index, "value", w.getTimestamp());
                    try {
                        valve.inputWatermark(w, index, downstream);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }

                @Override
                public void emitWatermarkStatus(WatermarkStatus s) {
                    flush();
                    idle = s.isIdle();
                    emit("status", "reader", index, "idle", s.isIdle());
                    try {
                        valve.inputWatermarkStatus(s, index, downstream);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }
            };
        }

        WatermarksSource.Reader reader() {
            return (WatermarksSource.Reader) operator.getSourceReader();
        }

        /** SRC-2 as in the sources engine: open (registration to the coordinator), then the output. */
        @SuppressWarnings("unchecked")
        void open() throws Exception {
            operator.open();
            forward();
            operator.emitNext((PushingAsyncDataInput.DataOutput<Long>) (Object) out);
        }

        void add(int split) throws Exception {
            deliver(new AddSplitEvent<>(List.of(new WatermarksSource.Split("s" + split)), WatermarksSource.SPLITS));
        }

        /** An event of the coordinator, to SourceOperator.handleOperatorEvent; then the reader reads. */
        void deliver(OperatorEvent event) throws Exception {
            operator.handleOperatorEvent(event);
            flush();
            read();
        }

        /** SourceOperator reads while it has more and does not wait for alignment (WM-25). */
        @SuppressWarnings("unchecked")
        void read() throws Exception {
            PushingAsyncDataInput.DataOutput<Long> o = (PushingAsyncDataInput.DataOutput<Long>) (Object) out;
            for (int guard = 0; guard < SourcesTask.POLL_GUARD; guard++) {
                DataInputStatus status = operator.emitNext(o);
                flush();
                if (status != DataInputStatus.MORE_AVAILABLE) {
                    return;
                }
            }
            throw new IllegalStateException("watermarks engine: reader " + index + " did not stop reading");
        }

        /** What the operator sent to the coordinator, handed on in order. */
        void forward() throws Exception {
            while (!outbox.isEmpty()) {
                coordinator.fromOperator(index, outbox.remove(0));
            }
        }

        /** WM-25: SourceOperator's waitingForAlignmentFuture, told in the trace when it changed. */
        void flush() {
            boolean now = waiting();
            if (now != blocked) {
                blocked = now;
                if (!quiet) {
                    emit(now ? "blocked" : "unblocked", "reader", index);
                }
            }
        }

        boolean waiting() {
            try {
                Field f = SourceOperator.class.getDeclaredField("waitingForAlignmentFuture");
                f.setAccessible(true);
                return !((CompletableFuture<?>) f.get(operator)).isDone();
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    /** What the valve emits downstream. */
    private final PushingAsyncDataInput.DataOutput<Object> downstream = new WatermarksEngine.Capture() {
        @Override
        public void emitWatermark(Watermark w) {
            emit("output_watermark", "value", w.getTimestamp());
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) {
            emit("output_status", "idle", s.isIdle());
        }
    };
}
