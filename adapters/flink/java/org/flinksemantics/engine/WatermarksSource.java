package org.flinksemantics.engine;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The project's FLIP-27 source of the watermarks area's alignment schedules (glue: its policies are the
 * schedule's). Its reader holds what the schedule made available (records and ends of splits) in that
 * order and reads it in order, skipping the splits that Flink's SourceOperator paused through
 * {@link SourceReader#pauseOrResumeSplits} (WM-26); whether it reads at all is SourceOperator's (WM-25).
 * Its enumerator assigns nothing: splits reach the readers as the AddSplitEvent SourceOperator handles.
 */
final class WatermarksSource implements Source<Long, WatermarksSource.Split, Void> {

    /** What a reader tells the harness. */
    interface Events {
        void paused(int reader, String split);

        void resumed(int reader, String split);

        void finished(int reader, String split);
    }

    private final Events events;

    WatermarksSource(Events events) {
        this.events = events;
    }

    /** Split n, with id "s" + n. */
    record Split(String splitId) implements SourceSplit {
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.CONTINUOUS_UNBOUNDED;
    }

    @Override
    public SplitEnumerator<Split, Void> createEnumerator(SplitEnumeratorContext<Split> ctx) {
        return new SplitEnumerator<>() {
            @Override
            public void start() {}

            @Override
            public void handleSplitRequest(int subtask, String host) {}

            @Override
            public void addSplitsBack(List<Split> splits, int subtask) {}

            @Override
            public void addReader(int subtask) {}

            @Override
            public Void snapshotState(long checkpointId) {
                return null;
            }

            @Override
            public void close() {}
        };
    }

    @Override
    public SplitEnumerator<Split, Void> restoreEnumerator(SplitEnumeratorContext<Split> ctx, Void state) {
        return createEnumerator(ctx);
    }

    @Override
    public SimpleVersionedSerializer<Split> getSplitSerializer() {
        return SPLITS;
    }

    @Override
    public SimpleVersionedSerializer<Void> getEnumeratorCheckpointSerializer() {
        return new SimpleVersionedSerializer<>() {
            @Override
            public int getVersion() {
                return 1;
            }

            @Override
            public byte[] serialize(Void v) {
                return new byte[0];
            }

            @Override
            public Void deserialize(int version, byte[] b) {
                return null;
            }
        };
    }

    static final SimpleVersionedSerializer<Split> SPLITS = new SimpleVersionedSerializer<>() {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Split s) {
            return s.splitId().getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public Split deserialize(int version, byte[] b) {
            return new Split(new String(b, StandardCharsets.UTF_8));
        }
    };

    @Override
    public SourceReader<Long, Split> createReader(SourceReaderContext context) {
        return new Reader(context.getIndexOfSubtask(), events);
    }

    /** A reader: what is available, in order; the splits SourceOperator paused wait. */
    static final class Reader implements SourceReader<Long, Split> {
        /** One available item: a record of a split ({@code end} false) or its end. */
        record Item(String split, long ts, boolean end) {
        }

        final int index;
        private final Events events;
        final List<Item> available = new ArrayList<>();
        final Set<String> paused = new HashSet<>();
        final List<String> splits = new ArrayList<>();  // the splits it has, in the order added
        ReaderOutput<Long> output;  // the main output SourceOperator reads into
        boolean ending;  // C5: at the end of input nothing waits
        String reading;  // the split whose record goes out

        Reader(int index, Events events) {
            this.index = index;
            this.events = events;
        }

        @Override
        public void start() {}

        /** The first available item of a split that is not paused, -1: none. */
        private int next() {
            for (int i = 0; i < available.size(); i++) {
                if (ending || !paused.contains(available.get(i).split())) {
                    return i;
                }
            }
            return -1;
        }

        /** WM-1: a record goes out through its split's output; an end releases the split's output (WM-9). */
        @Override
        public InputStatus pollNext(ReaderOutput<Long> out) {
            output = out;
            int i = next();
            if (i < 0) {
                return InputStatus.NOTHING_AVAILABLE;
            }
            Item item = available.remove(i);
            if (item.end()) {
                finish(item.split());
            } else {
                reading = item.split();
                out.createOutputForSplit(item.split()).collect(item.ts(), item.ts());
            }
            return next() < 0 ? InputStatus.NOTHING_AVAILABLE : InputStatus.MORE_AVAILABLE;
        }

        void finish(String split) {
            splits.remove(split);
            paused.remove(split);
            output.releaseOutputForSplit(split);
            events.finished(index, split);
        }

        @Override
        public List<Split> snapshotState(long checkpointId) {
            return splits.stream().map(Split::new).toList();
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return CompletableFuture.completedFuture(null);
        }

        @Override
        public void addSplits(List<Split> added) {
            for (Split s : added) {
                splits.add(s.splitId());
            }
        }

        @Override
        public void notifyNoMoreSplits() {}

        /** WM-26: Flink's SourceOperator pauses and resumes splits here. */
        @Override
        public void pauseOrResumeSplits(Collection<String> pause, Collection<String> resume) {
            // One call pauses a set (SourceOperator collects it from a HashMap): told in the order added.
            for (String s : splits.stream().filter(pause::contains).toList()) {
                if (paused.add(s)) {
                    events.paused(index, s);
                }
            }
            for (String s : splits.stream().filter(resume::contains).toList()) {
                if (paused.remove(s)) {
                    events.resumed(index, s);
                }
            }
        }

        @Override
        public void close() {}
    }
}
