package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.core.io.InputStatus;

/**
 * The user's side of a reader: the project's SourceReader, the spec's C2 reader (IteratorSourceReaderBase's
 * order: one split at a time, in the order it got them, records in offset order), which Flink's
 * SourceOperator creates, restores (SRC-2), feeds with AddSplitEvent and NoMoreSplitsEvent (SRC-8,
 * SRC-9), polls (emitNext) and snapshots into its list state (SRC-15). A `poll` step sets how many
 * records the external system has for it now ({@link #budget}); a split finishes as soon as its last
 * record is read (SRC-33, SRC-39); it reports END_OF_INPUT once it got NoMoreSplits and owns no split
 * (SRC-32), which SourceOperator turns into the task's end of data. It asks for splits only when the
 * schedule says so ({@link #request}), never by itself (C1, C5).
 */
final class SourcesReader implements SourceReader<int[], SourcesSplit> {

    /** What a reader tells the trace. */
    interface Events {
        void assigned(int reader, int split);

        void noMoreSplits(int reader);

        void splitFinished(int reader, int split);
    }

    final int index;
    final List<int[]> splits = new ArrayList<>();  // [split, position], owned, unfinished
    int budget;
    boolean noMore;
    private final SourceReaderContext context;
    private final List<Integer> sizes;
    private final Events events;
    private boolean started;

    SourcesReader(SourceReaderContext context, List<Integer> sizes, Events events) {
        this.context = context;
        this.index = context.getIndexOfSubtask();
        this.sizes = sizes;
        this.events = events;
    }

    @Override
    public void start() {
        started = true;
    }

    /** The `request` step: a RequestSplitEvent through SourceOperator's gateway (SRC-6). */
    void request() {
        context.sendSplitRequest();
    }

    /** SRC-39, SRC-33, SRC-32: finish what is read through, then one record if the budget allows. */
    @Override
    public InputStatus pollNext(ReaderOutput<int[]> output) {
        while (!splits.isEmpty()) {
            int[] head = splits.get(0);
            if (head[1] >= sizes.get(head[0])) {
                splits.remove(0);
                events.splitFinished(index, head[0]);
                continue;
            }
            if (budget == 0) {
                return InputStatus.NOTHING_AVAILABLE;
            }
            output.collect(new int[] {head[0], head[1]});
            head[1]++;
            budget--;
            return InputStatus.MORE_AVAILABLE;
        }
        return noMore ? InputStatus.END_OF_INPUT : InputStatus.NOTHING_AVAILABLE;
    }

    /** SRC-15: the unfinished splits with their positions, in reading order. */
    @Override
    public List<SourcesSplit> snapshotState(long checkpointId) {
        List<SourcesSplit> out = new ArrayList<>();
        for (int[] s : splits) {
            out.add(new SourcesSplit(s[0], s[1]));
        }
        return out;
    }

    @Override
    public CompletableFuture<Void> isAvailable() {
        return CompletableFuture.completedFuture(null);
    }

    /** SRC-8: splits join in arrival order; restored ones (before start) make no `assigned` event. */
    @Override
    public void addSplits(List<SourcesSplit> added) {
        for (SourcesSplit s : added) {
            splits.add(new int[] {s.id, s.position});
            if (started) {
                events.assigned(index, s.id);
            }
        }
    }

    /** SRC-9. */
    @Override
    public void notifyNoMoreSplits() {
        noMore = true;
        events.noMoreSplits(index);
    }

    @Override
    public void close() {
    }
}
