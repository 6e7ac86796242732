package org.flinksemantics.engine;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.common.eventtime.BoundedOutOfOrdernessWatermarks;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.streaming.api.operators.source.TimestampsAndWatermarks;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;

/**
 * The watermarks area (spec/watermarks.md) on Flink 2.3.0's classes. Each reader is the event-time
 * logic of a SourceOperator: {@link TimestampsAndWatermarks#createProgressiveEventTimeLogic} (as
 * SourceOperator builds it) with Flink's {@link WatermarkStrategy#forBoundedOutOfOrderness} generator
 * and {@code withIdleness} (WatermarksWithIdleness), per split an output of its main output
 * (createOutputForSplit: WatermarkOutputMultiplexer, WatermarkToDataOutput), its periodic emission a
 * timer on the task's processing time ({@link ManualTimeService}, the schedule's clock; readers in
 * index order, C3). What a reader sends goes to channel r of Flink's {@link StatusWatermarkValve}
 * downstream. Punctuated generators (C1) are the bounded out-of-orderness generator asked for its
 * watermark on every record. A schedule with alignment (`max_drift`) runs on Flink's SourceOperator and
 * SourceCoordinator instead ({@link WatermarksAligned}).
 */
public final class WatermarksEngine implements AreaEngine {

    static final String SPLIT = "s";

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("watermarks", null);
        c.put("watermarks.channels", null);
        c.put("watermarks.punctuated", null);
        c.put("watermarks.idleness", null);
        c.put("watermarks.alignment", null);
        c.put("watermarks.failover", null);
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception {
        Map<String, Object> config = (Map<String, Object>) schedule.getOrDefault("config", Map.of());
        List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
        if (config.get("max_drift") != null) {
            return aligned(config, steps);
        }
        Job job = new Job(((Number) config.getOrDefault("readers", 1)).intValue(),
                ((Number) config.getOrDefault("bound", 0)).longValue(),
                ((Number) config.getOrDefault("interval", 200)).longValue(),
                Boolean.TRUE.equals(config.get("punctuated")),
                config.get("idleness") == null ? null : ((Number) config.get("idleness")).longValue());
        for (int i = 0; i < steps.size(); i++) {
            job.step(i, steps.get(i));
        }
        return job.events;
    }

    /** WM-14, WM-22..WM-26: an alignment schedule on SourceOperator and SourceCoordinator (WatermarksAligned). */
    private static List<Map<String, Object>> aligned(Map<String, Object> config, List<Map<String, Object>> steps)
            throws Exception {
        WatermarksAligned job = new WatermarksAligned(((Number) config.getOrDefault("readers", 1)).intValue(),
                strategy(((Number) config.getOrDefault("bound", 0)).longValue(),
                        Boolean.TRUE.equals(config.get("punctuated")),
                        config.get("idleness") == null ? null : ((Number) config.get("idleness")).longValue()),
                ((Number) config.get("max_drift")).longValue(),
                ((Number) config.getOrDefault("interval", 200)).longValue(),
                ((Number) config.getOrDefault("alignment_buffer", 3)).intValue());
        try {
            for (int i = 0; i < steps.size(); i++) {
                job.step(i, steps.get(i));
            }
        } finally {
            job.close();
        }
        return job.events;
    }

    /** The generators of every split: bounded out-of-orderness, periodic or punctuated (C1), with idleness. */
    static WatermarkStrategy<Long> strategy(long bound, boolean punctuated, Long idleness) {
        WatermarkStrategy<Long> s = punctuated
                ? WatermarkStrategy.forGenerator(ctx -> new Punctuated(Duration.ofMillis(bound)))
                : WatermarkStrategy.forBoundedOutOfOrderness(Duration.ofMillis(bound));
        return idleness == null ? s : s.withIdleness(Duration.ofMillis(idleness));
    }

    /** C1: bounded out-of-orderness asked for its watermark on every record, never periodically. */
    static final class Punctuated implements WatermarkGenerator<Long> {
        private final BoundedOutOfOrdernessWatermarks<Long> bounded;

        Punctuated(Duration bound) {
            bounded = new BoundedOutOfOrdernessWatermarks<>(bound);
        }

        @Override
        public void onEvent(Long event, long timestamp, WatermarkOutput output) {
            bounded.onEvent(event, timestamp, output);
            bounded.onPeriodicEmit(output);
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {}
    }

    /** The job: readers, the valve downstream, the clock, the events. */
    static final class Job {
        final int readerCount;
        final WatermarkStrategy<Long> strategy;
        final long interval;
        final ManualTimeService time = new ManualTimeService();
        final List<Map<String, Object>> events = new ArrayList<>();
        final Map<Integer, Integer> owner = new HashMap<>();  // split -> reader
        List<Reader> readers;
        StatusWatermarkValve valve;
        int step;

        Job(int readers, long bound, long interval, boolean punctuated, Long idleness) {
            this.readerCount = readers;
            this.interval = interval;
            this.strategy = strategy(bound, punctuated, idleness);
            start();
        }

        /** A fresh job: every watermark at MIN (WM-16), the periodic emission from now (WM-3). */
        void start() {
            valve = new StatusWatermarkValve(readerCount);
            readers = new ArrayList<>();
            for (int r = 0; r < readerCount; r++) {
                readers.add(new Reader(this, r));
            }
        }

        void emit(String kind, Object... fields) {
            events.add(AreaEngine.event(step, kind, fields));
        }

        /** What the valve emits downstream. */
        final PushingAsyncDataInput.DataOutput<Object> downstream = new Capture() {
            @Override
            public void emitWatermark(Watermark w) {
                emit("output_watermark", "value", w.getTimestamp());
            }

            @Override
            public void emitWatermarkStatus(WatermarkStatus s) {
                emit("output_status", "idle", s.isIdle());
            }
        };

        void step(int index, Map<String, Object> step) throws Exception {
            this.step = index;
            switch ((String) step.get("op")) {
                case "add_split" -> {
                    int r = ((Number) step.get("reader")).intValue();
                    int split = ((Number) step.get("split")).intValue();
                    owner.put(split, r);
                    readers.get(r).add(split);
                }
                case "record" -> {
                    int split = ((Number) step.get("split")).intValue();
                    readers.get(owner.get(split)).record(split, ((Number) step.get("ts")).longValue());
                }
                case "tick" -> time.advance(((Number) step.get("ms")).longValue());
                case "finish_split" -> {
                    int split = ((Number) step.get("split")).intValue();
                    readers.get(owner.get(split)).finish(split);
                }
                case "failover" -> failover();
                case "end" -> end();
                default -> throw new IllegalArgumentException("not a watermarks step driven here: " + step);
            }
        }

        /** WM-16: the job restarts with the splits each reader had, registered at once, at MIN. */
        void failover() {
            List<List<Integer>> splits = new ArrayList<>();
            for (Reader reader : readers) {
                splits.add(new ArrayList<>(reader.splits.keySet()));
                reader.events.stopPeriodicWatermarkEmits();
            }
            emit("restarted");
            start();
            for (int r = 0; r < readerCount; r++) {
                for (int split : splits.get(r)) {
                    readers.get(r).add(split);
                }
            }
        }

        /**
         * WM-15: every split finishes, then every reader's task emits MAX. In Flink 2.3.0 the task
         * emits MAX past the reader's output, into its network output, which drops a watermark while
         * the status it announced is IDLE (RecordWriterOutput; FLINK-40499, D2): a reader whose last
         * status was IDLE sends nothing.
         */
        void end() throws Exception {
            for (Reader reader : readers) {
                for (int split : new ArrayList<>(reader.splits.keySet())) {
                    reader.finish(split);
                }
            }
            for (Reader reader : readers) {
                reader.events.stopPeriodicWatermarkEmits();
                if (!reader.idle) {
                    reader.out.emitWatermark(Watermark.MAX_WATERMARK);
                }
            }
        }
    }

    /** SourceOperator's listener, which feeds alignment only (not driven here). */
    static final TimestampsAndWatermarks.WatermarkUpdateListener NO_ALIGNMENT =
            new TimestampsAndWatermarks.WatermarkUpdateListener() {
                @Override
                public void updateIdle(boolean idle) {}

                @Override
                public void updateCurrentEffectiveWatermark(long watermark) {}

                @Override
                public void updateCurrentSplitWatermark(String split, long watermark) {}

                @Override
                public void updateCurrentSplitIdle(String split, boolean idle) {}

                @Override
                public void splitFinished(String split) {}
            };

    /** A DataOutput that keeps nothing but what a subclass catches. */
    abstract static class Capture implements PushingAsyncDataInput.DataOutput<Object> {
        @Override
        public void emitRecord(StreamRecord<Object> r) {}

        @Override
        public void emitWatermark(Watermark w) {}

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) {}

        @Override
        public void emitLatencyMarker(LatencyMarker m) {}

        @Override
        public void emitRecordAttributes(RecordAttributes a) {}

        @Override
        public void emitWatermark(WatermarkEvent e) {}
    }

    /** A reader: a SourceOperator's event-time logic and its main output, sending to valve channel r. */
    static final class Reader {
        final Job job;
        final int index;
        final TimestampsAndWatermarks<Long> events;
        final ReaderOutput<Long> main;
        final Map<Integer, SourceOutput<Long>> splits = new LinkedHashMap<>();
        int reading = -1;  // the split whose record is being emitted
        boolean idle;  // the last status this reader sent

        /** What the reader sends downstream: to the trace and to channel `index` of the valve. */
        final PushingAsyncDataInput.DataOutput<Object> out;

        @SuppressWarnings("unchecked")
        Reader(Job job, int index) {
            this.job = job;
            this.index = index;
            this.out = new Capture() {
                @Override
                public void emitRecord(StreamRecord<Object> r) {
                    job.emit("record", "split", reading, "ts", r.getTimestamp());
                }

                @Override
                public void emitWatermark(Watermark w) {
                    job.emit("watermark", "reader", index, "value", w.getTimestamp());
                    try {
                        job.valve.inputWatermark(w, index, job.downstream);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }

                @Override
                public void emitWatermarkStatus(WatermarkStatus s) {
                    idle = s.isIdle();
                    job.emit("status", "reader", index, "idle", s.isIdle());
                    try {
                        job.valve.inputWatermarkStatus(s, index, job.downstream);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }
            };
            events = TimestampsAndWatermarks.createProgressiveEventTimeLogic(job.strategy,
                    new UnregisteredMetricsGroup(), job.time, job.interval, job.time.getClock(), job.time.getClock(),
                    UnregisteredMetricGroups.createUnregisteredTaskMetricGroup().getIOMetricGroup());
            main = events.createMainOutput((PushingAsyncDataInput.DataOutput<Long>) (Object) out, NO_ALIGNMENT);
            events.startPeriodicWatermarkEmits();
        }

        /** WM-4, WM-10: the split's output is registered when it is added. */
        void add(int split) {
            splits.put(split, main.createOutputForSplit(SPLIT + split));
        }

        /** WM-1, WM-2, WM-8: the record goes out, then the split's generator sees it. */
        void record(int split, long ts) {
            reading = split;
            splits.get(split).collect(ts, ts);
        }

        /** WM-9: the split's output is released. */
        void finish(int split) {
            splits.remove(split);
            main.releaseOutputForSplit(SPLIT + split);
            job.emit("split_finished", "split", split);
        }
    }
}
