package org.flinksemantics.engine;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.BiConsumer;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The user's side of the sources area: the project's FLIP-27 {@link Source} and its split
 * enumerator, the connector code that Flink's SourceCoordinator drives. Its policy is the spec's C1
 * (the one of IteratorSourceEnumerator, with the pushes of discovering enumerators): a FIFO queue of
 * split ids; a request gets the head, or NoMoreSplits when a bounded source has none left (SRC-10);
 * an unbounded source leaves it unanswered; returned splits join the tail (SRC-24). Whether a
 * request reaches it at all (SRC-6), the registry (SRC-4), the tracker (SRC-7) and the events'
 * delivery (SRC-13) are Flink's, not this class's. Its reader is SourcesReader.
 */
final class SourcesSource implements Source<int[], SourcesSplit, List<Integer>> {

    private final List<Integer> initial;
    private final boolean bounded;
    private final BiConsumer<Integer, List<Integer>> onSplitsBack;
    private final List<Integer> sizes;
    private final SourcesReader.Events events;
    Enumerator enumerator;

    /**
     * The source of splits {@code initial}, whose record counts are {@code sizes} (the external
     * system, which `discover` steps extend); {@code onSplitsBack} sees each addSplitsBack, the
     * readers report to {@code events}.
     */
    SourcesSource(List<Integer> initial, boolean bounded, BiConsumer<Integer, List<Integer>> onSplitsBack,
            List<Integer> sizes, SourcesReader.Events events) {
        this.initial = initial;
        this.bounded = bounded;
        this.onSplitsBack = onSplitsBack;
        this.sizes = sizes;
        this.events = events;
    }

    @Override
    public Boundedness getBoundedness() {
        return bounded ? Boundedness.BOUNDED : Boundedness.CONTINUOUS_UNBOUNDED;
    }

    @Override
    public SplitEnumerator<SourcesSplit, List<Integer>> createEnumerator(SplitEnumeratorContext<SourcesSplit> ctx) {
        enumerator = new Enumerator(ctx, initial);
        return enumerator;
    }

    @Override
    public SplitEnumerator<SourcesSplit, List<Integer>> restoreEnumerator(SplitEnumeratorContext<SourcesSplit> ctx,
            List<Integer> checkpoint) {
        enumerator = new Enumerator(ctx, checkpoint);
        return enumerator;
    }

    @Override
    public SimpleVersionedSerializer<SourcesSplit> getSplitSerializer() {
        return new SplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<List<Integer>> getEnumeratorCheckpointSerializer() {
        return new QueueSerializer();
    }

    /** The reader SourceOperator creates in its open(): the project's C2 reader (SourcesReader). */
    @Override
    public SourceReader<int[], SourcesSplit> createReader(SourceReaderContext readerContext) {
        return new SourcesReader(readerContext, sizes, events);
    }

    /** The enumerator: a queue of splits, assigned as the schedule says (C1). */
    final class Enumerator implements SplitEnumerator<SourcesSplit, List<Integer>> {
        final SplitEnumeratorContext<SourcesSplit> context;
        final List<Integer> queue;
        private final Set<Integer> toldNoMore = new HashSet<>();  // C1: no push after NoMoreSplits
        boolean failNextSnapshot;
        List<Integer> lastSnapshot;

        Enumerator(SplitEnumeratorContext<SourcesSplit> context, List<Integer> queue) {
            this.context = context;
            this.queue = new ArrayList<>(queue);
        }

        @Override
        public void start() {
        }

        /** SRC-10: the head, or NoMoreSplits when a bounded source has none (C1). */
        @Override
        public void handleSplitRequest(int subtask, String host) {
            if (!queue.isEmpty()) {
                context.assignSplit(new SourcesSplit(queue.get(0)), subtask);
                queue.remove(0);
            } else if (bounded) {
                toldNoMore.add(subtask);
                context.signalNoMoreSplits(subtask);
            }
        }

        /** An assignment unasked (the `assign` step); Flink's context refuses an unregistered reader (SRC-4). */
        void push(int subtask) {
            if (!toldNoMore.contains(subtask) && !queue.isEmpty()) {
                context.assignSplit(new SourcesSplit(queue.get(0)), subtask);
                queue.remove(0);
            }
        }

        /** SRC-42: newly discovered splits join the queue. */
        void discover(List<Integer> splits) {
            queue.addAll(splits);
        }

        /** SRC-27: the enumerator throws (the `fail_enumerator` step). */
        void fail() {
            throw new IllegalStateException("the enumerator fails (fail_enumerator, SRC-27)");
        }

        /** SRC-24: the returned splits join the tail, for any reader. */
        @Override
        public void addSplitsBack(List<SourcesSplit> splits, int subtask) {
            toldNoMore.remove(subtask);
            List<Integer> ids = new ArrayList<>();
            for (SourcesSplit s : splits) {
                ids.add(s.id);
            }
            onSplitsBack.accept(subtask, ids);
            queue.addAll(ids);
        }

        @Override
        public void addReader(int subtask) {
        }

        /** SRC-12: the unassigned splits in queue order; SRC-19: throws when the schedule says so. */
        @Override
        public List<Integer> snapshotState(long checkpointId) {
            if (failNextSnapshot) {
                failNextSnapshot = false;
                throw new IllegalStateException("the enumerator's snapshot fails (SRC-19)");
            }
            lastSnapshot = new ArrayList<>(queue);
            return lastSnapshot;
        }

        @Override
        public void close() {
        }
    }

    /** A split as "id:position". */
    static final class SplitSerializer implements SimpleVersionedSerializer<SourcesSplit> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(SourcesSplit s) {
            return (s.id + ":" + s.position).getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public SourcesSplit deserialize(int version, byte[] b) {
            String[] parts = new String(b, StandardCharsets.UTF_8).split(":");
            return new SourcesSplit(Integer.parseInt(parts[0]), Integer.parseInt(parts[1]));
        }
    }

    /** The enumerator's state: its queue of split ids. */
    static final class QueueSerializer implements SimpleVersionedSerializer<List<Integer>> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(List<Integer> q) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            DataOutputStream out = new DataOutputStream(bytes);
            out.writeInt(q.size());
            for (int s : q) {
                out.writeInt(s);
            }
            out.flush();
            return bytes.toByteArray();
        }

        @Override
        public List<Integer> deserialize(int version, byte[] b) throws IOException {
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(b));
            List<Integer> q = new ArrayList<>();
            for (int n = in.readInt(); n > 0; n--) {
                q.add(in.readInt());
            }
            return q;
        }
    }
}
