package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.api.common.typeutils.base.VoidSerializer;
import org.apache.flink.streaming.api.functions.sink.legacy.SinkFunction;
import org.apache.flink.streaming.api.functions.sink.legacy.TwoPhaseCommitSinkFunction;

/**
 * The sink chained to each reader: the project's transactional sink on Flink's
 * {@link TwoPhaseCommitSinkFunction}, which decides when a transaction is pre-committed (at each
 * barrier), committed (on a notified completion: every pending transaction up to N, SRC-17), recovered
 * and committed or aborted at a restore (SRC-29, SRC-20) and never committed (an attempt's work after
 * the restore point, SRC-20). Its external system ({@link External}) is the project's: transactions by
 * name, whose records become visible when committed, once (recoverAndCommit may repeat a commit, as
 * Flink's contract allows, and a repeated commit changes nothing).
 */
final class SourcesSink extends TwoPhaseCommitSinkFunction<int[], String, Void> {

    private static final long serialVersionUID = 1L;
    private final transient External external;
    private final int reader;

    SourcesSink(External external, int reader) {
        super(StringSerializer.INSTANCE, VoidSerializer.INSTANCE);
        this.external = external;
        this.reader = reader;
    }

    @Override
    protected String beginTransaction() {
        return external.begin(reader);
    }

    @Override
    protected void invoke(String transaction, int[] record, SinkFunction.Context context) {
        external.write(transaction, record);
    }

    @Override
    protected void preCommit(String transaction) {
    }

    @Override
    protected void commit(String transaction) {
        external.commit(transaction);
    }

    @Override
    protected void abort(String transaction) {
        external.abort(transaction);
    }

    /** The external system of the sinks: open transactions, and the records committed since last asked. */
    static final class External {
        private final Map<String, List<int[]>> open = new HashMap<>();
        private final Set<String> committed = new HashSet<>();
        private final List<int[]> fresh = new ArrayList<>();
        private int next;

        String begin(int reader) {
            String name = "reader " + reader + " transaction " + next++;
            open.put(name, new ArrayList<>());
            return name;
        }

        void write(String transaction, int[] record) {
            open.get(transaction).add(record);
        }

        void commit(String transaction) {
            List<int[]> records = open.remove(transaction);
            if (records != null && committed.add(transaction)) {
                fresh.addAll(records);
            }
        }

        void abort(String transaction) {
            open.remove(transaction);
        }

        /** The records committed since the last call. */
        List<int[]> takeCommitted() {
            List<int[]> out = new ArrayList<>(fresh);
            fresh.clear();
            return out;
        }
    }
}
