package org.flinksemantics.engine;

import org.apache.flink.api.connector.source.SourceSplit;

/**
 * A split of the sources area's schedules (split 0, 1, ...) at a reader's position in it (0 when the
 * enumerator hands it out; a reader's snapshot stores where it stands, SRC-15). Equal by split id:
 * the split Flink's SplitAssignmentTracker holds once per bucket.
 */
final class SourcesSplit implements SourceSplit {

    final int id;
    final int position;

    SourcesSplit(int id) {
        this(id, 0);
    }

    SourcesSplit(int id, int position) {
        this.id = id;
        this.position = position;
    }

    @Override
    public String splitId() {
        return Integer.toString(id);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof SourcesSplit && ((SourcesSplit) o).id == id;
    }

    @Override
    public int hashCode() {
        return id;
    }

    @Override
    public String toString() {
        return "s" + id + ":" + position;
    }
}
