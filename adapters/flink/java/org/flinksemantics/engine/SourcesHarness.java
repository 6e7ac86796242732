package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * One schedule of the sources area: the JobManager's checkpoint and failover calls on Flink's
 * coordinator (SourcesCoordinator), and the tasks' side, which is the project's: the readers (the
 * spec's C2 reader: one split at a time, SRC-32, SRC-33, SRC-39, their snapshots SRC-15 and restored
 * state SRC-2) and the two-phase-commit sink chained to each (SRC-17, SRC-29, SRC-38, SRC-44).
 * SourceOperator is not driven: see SourcesEngine.READER. Which splits a reader gets, when, whether a
 * request or a push reaches the enumerator, which events wait for a snapshot and which splits go back
 * at a failover are decided by Flink's classes; this class only keeps what the readers got.
 */
final class SourcesHarness implements AutoCloseable {

    /** One reader attempt and its sink. */
    static final class Reader {
        boolean registered;
        List<int[]> restored = new ArrayList<>();
        List<int[]> splits = new ArrayList<>();  // [split, position], owned, unfinished
        boolean noMore;
        boolean ended;
        List<int[]> pending = new ArrayList<>();  // records since the last barrier
        TreeMap<Long, List<int[]>> staged = new TreeMap<>();
    }

    /** A checkpoint as the schedule drives it: its coordinator bytes, the readers' states, its state. */
    static final class Checkpoint {
        int discovered;
        Map<Integer, List<int[]>> readers = new HashMap<>();
        String state = "taken";
        byte[] bytes;  // SourceCoordinator.checkpointCoordinator's result
    }

    static final int END_ROUNDS = 100_000;  // hang guard of `end`

    final List<Map<String, Object>> events = new ArrayList<>();
    private final List<Integer> sizes;
    private final int initialSplits;
    private final boolean bounded;
    private final List<Reader> readers = new ArrayList<>();
    private final int parallelism;
    private int discovered;
    private SourcesCoordinator coordinator;
    private Long awaitingBarrier;
    private final Map<Long, Checkpoint> checkpoints = new HashMap<>();
    private Long lastCompleted;
    private int step;
    private List<Integer> back;

    SourcesHarness(int parallelism, List<Integer> sizes, boolean bounded) {
        this.sizes = new ArrayList<>(sizes);
        this.initialSplits = sizes.size();
        this.bounded = bounded;
        for (int r = 0; r < parallelism; r++) {
            readers.add(new Reader());
        }
        this.parallelism = parallelism;
        discovered = sizes.size();
    }

    /** Starts Flink's coordinator before the first step (-1: no restored checkpoint). */
    void start() throws Exception {
        coordinator = newCoordinator(initialQueue(), -1, null);
    }

    private SourcesCoordinator newCoordinator(List<Integer> queue, long restoredId, byte[] bytes) throws Exception {
        return new SourcesCoordinator(parallelism, queue, bounded, restoredId, bytes, this::deliver,
                (r, splits) -> back = splits);
    }

    private List<Integer> initialQueue() {
        List<Integer> q = new ArrayList<>();
        for (int s = 0; s < initialSplits; s++) {
            q.add(s);
        }
        return q;
    }

    @Override
    public void close() throws Exception {
        coordinator.close();
    }

    void apply(int index, Map<String, Object> s) throws Exception {
        step = index;
        String op = (String) s.get("op");
        switch (op) {
            case "register" -> register(num(s, "reader"));
            case "request" -> coordinator.request(num(s, "reader"));
            case "assign" -> coordinator.push(num(s, "reader"));
            case "discover" -> discover(num(s, "records"));
            case "poll" -> poll(num(s, "reader"), s.containsKey("records") ? num(s, "records") : 1);
            case "checkpoint" -> checkpoint(num(s, "id"), Boolean.TRUE.equals(s.get("fails")));
            case "barrier" -> barrier(num(s, "id"));
            case "complete" -> complete(num(s, "id"), !Boolean.FALSE.equals(s.get("notify")));
            case "abort" -> abort(num(s, "id"));
            case "fail" -> fail(num(s, "task"));
            case "fail_enumerator" -> coordinator.failEnumerator();
            case "rescale" -> throw new UnsupportedOperationException(SourcesEngine.RESCALE);
            case "end" -> end();
            default -> throw new IllegalArgumentException("unknown step " + op);
        }
        if (coordinator.failure != null) {
            globalFailover(coordinator.failureCause());  // SRC-4, SRC-27: the holder's failJob
        }
    }

    static int num(Map<String, Object> s, String key) {
        return ((Number) s.get(key)).intValue();
    }

    private void emit(String kind, Object... fields) {
        events.add(AreaEngine.event(step, kind, fields));
    }

    static List<List<Integer>> pairs(List<int[]> ps) {
        List<List<Integer>> out = new ArrayList<>();
        for (int[] p : ps) {
            out.add(List.of(p[0], p[1]));
        }
        return out;
    }

    static List<List<Integer>> sorted(List<int[]> ps) {
        List<int[]> c = new ArrayList<>(ps);
        c.sort(Comparator.<int[]>comparingInt(p -> p[0]).thenComparingInt(p -> p[1]));
        return pairs(c);
    }

    static List<int[]> copy(List<int[]> ps) {
        List<int[]> out = new ArrayList<>();
        for (int[] p : ps) {
            out.add(new int[] {p[0], p[1]});
        }
        return out;
    }

    // ---- readers (the project's C2 reader and its sink) ----

    /** SRC-2: the restored splits go to the reader, then it registers with Flink's coordinator. */
    private void register(int r) throws Exception {
        Reader reader = readers.get(r);
        reader.registered = true;
        reader.splits = copy(reader.restored);
        reader.restored = new ArrayList<>();
        emit("registered", "reader", r, "splits", pairs(reader.splits));
        coordinator.register(r);
    }

    /** SRC-39, SRC-33: one split at a time, records in offset order. */
    private void poll(int r, int budget) {
        Reader reader = readers.get(r);
        while (!reader.splits.isEmpty()) {
            int[] head = reader.splits.get(0);
            if (head[1] >= sizes.get(head[0])) {
                reader.splits.remove(0);
                emit("split_finished", "reader", r, "split", head[0]);
                continue;
            }
            if (budget == 0) {
                break;
            }
            emit("record", "reader", r, "split", head[0], "offset", head[1]);
            reader.pending.add(new int[] {head[0], head[1]});
            head[1]++;
            budget--;
        }
        maybeEnd(r);
    }

    /** SRC-32. */
    private void maybeEnd(int r) {
        Reader reader = readers.get(r);
        if (reader.noMore && reader.splits.isEmpty() && !reader.ended) {
            reader.ended = true;
            emit("end_of_input", "reader", r);
        }
    }

    /** An AddSplitEvent or NoMoreSplitsEvent that Flink's gateway let through reaches the reader (SRC-8, SRC-9). */
    private void deliver(int r, int split) {
        Reader reader = readers.get(r);
        if (split >= 0) {
            reader.splits.add(new int[] {split, 0});
            emit("assigned", "reader", r, "split", split);
        } else {
            reader.noMore = true;
            emit("no_more_splits", "reader", r);
            maybeEnd(r);
        }
    }

    /** SRC-42: the external system's new split; the enumerator takes what it has not discovered yet. */
    private void discover(int records) throws Exception {
        sizes.add(records);
        List<Integer> fresh = new ArrayList<>();
        for (int s = discovered; s < sizes.size(); s++) {
            fresh.add(s);
        }
        discovered = sizes.size();
        coordinator.discover(fresh);
    }

    // ---- checkpoints ----

    /** SRC-11, SRC-19: Flink's holder takes the coordinator checkpoint and closes the gateways. */
    private void checkpoint(long id, boolean fails) throws Exception {
        Checkpoint cp = new Checkpoint();
        cp.discovered = discovered;
        checkpoints.put(id, cp);
        cp.bytes = coordinator.checkpoint(id, fails);
        if (cp.bytes == null) {
            cp.state = "aborted";
            emit("checkpoint_failed", "id", id);
            return;
        }
        emit("enumerator_checkpoint", "id", id, "splits", new ArrayList<>(coordinator.source.enumerator.lastSnapshot));
        awaitingBarrier = id;
    }

    /**
     * SRC-15, C3: the barrier reaches every reader, which takes its snapshot (in index order); then the
     * tasks' acknowledgements reach the holder in index order, each opening its reader's gateway
     * (SRC-13). Flink fixes no order across subtasks; this one is the reference model's.
     */
    private void barrier(long id) throws Exception {
        Checkpoint cp = checkpoints.get(id);
        awaitingBarrier = null;
        cp.state = "barrier";
        for (int r = 0; r < readers.size(); r++) {
            Reader reader = readers.get(r);
            cp.readers.put(r, copy(reader.splits));
            emit("reader_checkpoint", "id", id, "reader", r, "splits", pairs(reader.splits));
            reader.staged.put(id, reader.pending);
            reader.pending = new ArrayList<>();
        }
        for (int r = 0; r < readers.size(); r++) {
            coordinator.snapshotTaken(r, id);
        }
    }

    private void complete(long id, boolean notify) throws Exception {
        Checkpoint cp = checkpoints.get(id);
        if (!"completed".equals(cp.state)) {
            cp.state = "completed";
            lastCompleted = id;
        }
        if (notify) {
            coordinator.completed(id);  // SRC-17: Flink's tracker drops what N covers
            List<int[]> records = new ArrayList<>();
            for (Reader reader : readers) {
                records.addAll(takeStaged(reader, id));
            }
            emit("committed", "checkpoint", id, "records", sorted(records));
        }
    }

    private static List<int[]> takeStaged(Reader reader, Long n) {
        List<int[]> out = new ArrayList<>();
        if (n == null) {
            return out;
        }
        Map<Long, List<int[]>> upTo = new TreeMap<>(reader.staged.headMap(n, true));
        for (Map.Entry<Long, List<int[]>> e : upTo.entrySet()) {
            out.addAll(e.getValue());
            reader.staged.remove(e.getKey());
        }
        return out;
    }

    /** SRC-18: before its barrier, an abort is a failed trigger (the gateways reopen); Flink's tracker is not told. */
    private void abort(long id) throws Exception {
        checkpoints.get(id).state = "aborted";
        emit("aborted", "id", id);
        abortInFlink(id);
    }

    private void abortInFlink(long id) throws Exception {
        if (awaitingBarrier != null && awaitingBarrier == id) {
            awaitingBarrier = null;
            coordinator.abortTriggering(id);
        } else {
            coordinator.aborted(id);
        }
    }

    private List<Long> abortPending() {
        List<Long> ids = new ArrayList<>();
        for (long n : new TreeMap<>(checkpoints).keySet()) {
            Checkpoint cp = checkpoints.get(n);
            if ("taken".equals(cp.state) || "barrier".equals(cp.state)) {
                cp.state = "aborted";
                emit("aborted", "id", n);
                ids.add(n);
            }
        }
        return ids;
    }

    // ---- failover ----

    /** SRC-20..SRC-24 (C4): the attempt fails, the pending checkpoints abort, the subtask is reset to the
     * last completed checkpoint: Flink's SourceCoordinator.subtaskReset gives back what its tracker holds. */
    private void fail(int r) throws Exception {
        emit("reset", "tasks", List.of(r));
        List<Long> aborted = abortPending();
        Reader old = readers.get(r);
        old.registered = false;
        coordinator.attemptFailed(r);
        for (long id : aborted) {
            abortInFlink(id);
        }
        List<int[]> records = takeStaged(old, lastCompleted);  // SRC-29
        if (!records.isEmpty()) {
            emit("committed", "checkpoint", lastCompleted, "records", sorted(records));
        }
        Reader fresh = new Reader();
        Checkpoint cp = lastCompleted == null ? null : checkpoints.get(lastCompleted);
        if (cp != null) {
            fresh.restored = copy(cp.readers.getOrDefault(r, List.of()));
        }
        readers.set(r, fresh);
        back = null;
        coordinator.subtaskReset(r, lastCompleted == null ? -1 : lastCompleted);
        if (back == null) {
            throw new IllegalStateException("sources engine: Flink's subtaskReset did not call addSplitsBack");
        }
        emit("splits_back", "reader", r, "splits", back);
    }

    /** SRC-27, SRC-28, SRC-29: everything restarts from the last completed checkpoint: a new coordinator
     * reset to its bytes (RecreateOnResetOperatorCoordinator), the readers from their states in it. */
    private void globalFailover(String cause) throws Exception {
        Long n = lastCompleted;
        emit("global_failover", "checkpoint", n, "cause", cause);
        abortPending();
        List<int[]> records = new ArrayList<>();
        for (Reader reader : readers) {
            records.addAll(takeStaged(reader, n));
        }
        if (!records.isEmpty()) {
            emit("committed", "checkpoint", n, "records", sorted(records));
        }
        Checkpoint cp = n == null ? null : checkpoints.get(n);
        for (int r = 0; r < readers.size(); r++) {
            Reader fresh = new Reader();
            if (cp != null) {
                fresh.restored = copy(cp.readers.getOrDefault(r, List.of()));
            }
            readers.set(r, fresh);
        }
        coordinator.close();
        coordinator = newCoordinator(initialQueue(), n == null ? -1 : n, cp == null ? null : cp.bytes);
        discovered = cp != null ? cp.discovered : initialSplits;
        awaitingBarrier = null;
    }

    /** SRC-44, SRC-38 (C5): run to completion in rounds; the final checkpoint commits everything. */
    private void end() throws Exception {
        for (int r = 0; r < readers.size(); r++) {
            if (!readers.get(r).registered) {
                register(r);
            }
        }
        for (int round = 0; !readers.stream().allMatch(x -> x.ended); round++) {
            if (round == END_ROUNDS || coordinator.failure != null) {
                throw new IllegalStateException("sources engine: `end` did not finish (round " + round
                        + ", failure " + coordinator.failure + ")");
            }
            for (int r = 0; r < readers.size(); r++) {
                Reader reader = readers.get(r);
                if (reader.ended) {
                    continue;
                }
                if (!reader.splits.isEmpty()) {
                    int left = 0;
                    for (int[] p : reader.splits) {
                        left += sizes.get(p[0]) - p[1];
                    }
                    poll(r, left);
                } else {
                    coordinator.request(r);
                }
            }
        }
        List<int[]> records = new ArrayList<>();
        for (Reader reader : readers) {
            for (List<int[]> staged : reader.staged.values()) {
                records.addAll(staged);
            }
            records.addAll(reader.pending);
        }
        emit("committed", "checkpoint", null, "records", sorted(records));
        emit("finished");
    }
}
