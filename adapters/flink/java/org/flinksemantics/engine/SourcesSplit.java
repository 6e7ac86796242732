package org.flinksemantics.engine;

import org.apache.flink.api.connector.source.SourceSplit;

/** A split of the sources area's schedules (split 0, 1, ...), the SourceSplit Flink's tracker holds. */
final class SourcesSplit implements SourceSplit {

    final int id;

    SourcesSplit(int id) {
        this.id = id;
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
}
