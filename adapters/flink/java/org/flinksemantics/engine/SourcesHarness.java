package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * The task around Flink's SplitAssignmentTracker (SourcesEngine.Tracker) for one schedule of the
 * sources area: the project's own enumerator (a queue of splits, assigned as the schedule says), the
 * coordinator's reader registry and event valve (SRC-13), the readers (SRC-32, SRC-33, SRC-39) and the
 * sink chained to each that commits on notified completion. The bookkeeping the rules are about,
 * which splits go back to the enumerator when, is the tracker's.
 */
final class SourcesHarness {

    /** One reader attempt and its sink. */
    static final class Reader {
        boolean registered;
        List<int[]> restored = new ArrayList<>();
        List<int[]> splits = new ArrayList<>();  // [split, position], owned, unfinished
        boolean noMore;
        boolean ended;
        List<int[]> held = new ArrayList<>();  // {split} or {-1} for NoMoreSplits, behind the valve
        List<int[]> pending = new ArrayList<>();  // records since the last barrier
        TreeMap<Long, List<int[]>> staged = new TreeMap<>();
    }

    /** A checkpoint: the enumerator's queue, the readers' states, its state. */
    static final class Checkpoint {
        List<Integer> queue;
        int discovered;
        Map<Integer, List<int[]>> readers = new HashMap<>();
        String state = "taken";
    }

    final List<Map<String, Object>> events = new ArrayList<>();
    private final List<Integer> sizes;
    private final int initialSplits;
    private final boolean bounded;
    private final List<Reader> readers = new ArrayList<>();
    private List<Integer> queue = new ArrayList<>();
    private int discovered;
    private Set<Integer> noMore = new HashSet<>();
    private SourcesEngine.Tracker tracker = new SourcesEngine.Tracker();
    private Long valve;
    private final Map<Long, Checkpoint> checkpoints = new HashMap<>();
    private Long lastCompleted;
    private int step;

    SourcesHarness(int parallelism, List<Integer> sizes, boolean bounded) {
        this.sizes = new ArrayList<>(sizes);
        this.initialSplits = sizes.size();
        this.bounded = bounded;
        for (int r = 0; r < parallelism; r++) {
            readers.add(new Reader());
        }
        for (int s = 0; s < sizes.size(); s++) {
            queue.add(s);
        }
        discovered = sizes.size();
    }

    void apply(int index, Map<String, Object> s) throws Exception {
        step = index;
        String op = (String) s.get("op");
        switch (op) {
            case "register" -> register(num(s, "reader"));
            case "request" -> request(num(s, "reader"));
            case "assign" -> push(num(s, "reader"));
            case "discover" -> discover(num(s, "records"));
            case "poll" -> poll(num(s, "reader"), s.containsKey("records") ? num(s, "records") : 1);
            case "checkpoint" -> checkpoint(num(s, "id"), Boolean.TRUE.equals(s.get("fails")));
            case "barrier" -> barrier(num(s, "id"));
            case "complete" -> complete(num(s, "id"), !Boolean.FALSE.equals(s.get("notify")));
            case "abort" -> abort(num(s, "id"));
            case "fail" -> fail(num(s, "task"));
            case "fail_enumerator" -> globalFailover("enumerator");  // SRC-27
            case "rescale" -> throw new UnsupportedOperationException(SourcesEngine.RESCALE);
            case "end" -> end();
            default -> throw new IllegalArgumentException("unknown step " + op);
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

    // ---- readers ----

    /** SRC-2: the restored splits go to the reader, then it registers. */
    private void register(int r) {
        Reader reader = readers.get(r);
        reader.registered = true;
        reader.splits = copy(reader.restored);
        reader.restored = new ArrayList<>();
        emit("registered", "reader", r, "splits", pairs(reader.splits));
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

    /** SRC-13: events after coordinator checkpoint N wait for the reader's snapshot of N. */
    private void send(int r, int split) {
        if (valve != null) {
            readers.get(r).held.add(new int[] {split});
        } else {
            deliver(r, split);
        }
    }

    private void openValve() {
        valve = null;
        for (int r = 0; r < readers.size(); r++) {
            Reader reader = readers.get(r);
            List<int[]> held = reader.held;
            reader.held = new ArrayList<>();
            for (int[] e : held) {
                deliver(r, e[0]);
            }
        }
    }

    // ---- coordinator ----

    /** SRC-4 (an unregistered reader fails the job), SRC-7 (Flink's tracker records it). */
    private void assign(int r) throws Exception {
        if (!readers.get(r).registered) {
            globalFailover("unregistered");
            return;
        }
        int split = queue.remove(0);
        tracker.assigned(r, split);
        send(r, split);
    }

    /** SRC-6, SRC-9, SRC-10. */
    private void request(int r) throws Exception {
        if (noMore.contains(r)) {
            return;
        }
        if (!queue.isEmpty()) {
            assign(r);
        } else if (bounded) {
            noMore.add(r);
            send(r, -1);
        }
    }

    private void push(int r) throws Exception {
        if (!noMore.contains(r) && !queue.isEmpty()) {
            assign(r);
        }
    }

    /** SRC-42. */
    private void discover(int records) {
        sizes.add(records);
        for (int s = discovered; s < sizes.size(); s++) {
            queue.add(s);
        }
        discovered = sizes.size();
    }

    // ---- checkpoints ----

    /** SRC-11: Flink's tracker moves its uncheckpointed assignments under N; SRC-19. */
    private void checkpoint(long id, boolean fails) throws Exception {
        tracker.checkpoint(id);
        Checkpoint cp = new Checkpoint();
        cp.queue = new ArrayList<>(queue);
        cp.discovered = discovered;
        checkpoints.put(id, cp);
        if (fails) {
            cp.state = "aborted";
            emit("checkpoint_failed", "id", id);
            return;
        }
        emit("enumerator_checkpoint", "id", id, "splits", new ArrayList<>(cp.queue));
        valve = id;
    }

    /** SRC-15, SRC-13. */
    private void barrier(long id) {
        Checkpoint cp = checkpoints.get(id);
        for (int r = 0; r < readers.size(); r++) {
            Reader reader = readers.get(r);
            cp.readers.put(r, copy(reader.splits));
            emit("reader_checkpoint", "id", id, "reader", r, "splits", pairs(reader.splits));
            reader.staged.put(id, reader.pending);
            reader.pending = new ArrayList<>();
        }
        cp.state = "barrier";
        openValve();
    }

    private void complete(long id, boolean notify) {
        Checkpoint cp = checkpoints.get(id);
        if (!"completed".equals(cp.state)) {
            cp.state = "completed";
            lastCompleted = id;
        }
        if (notify) {
            notifyComplete(id);
        }
    }

    /** SRC-17: Flink's tracker drops what it tracked up to N; the sinks commit up to N. */
    private void notifyComplete(long n) {
        tracker.completed(n);
        List<int[]> records = new ArrayList<>();
        for (Reader reader : readers) {
            records.addAll(takeStaged(reader, n));
        }
        emit("committed", "checkpoint", n, "records", sorted(records));
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

    /** SRC-18: the tracker is not told. */
    private void abort(long id) {
        checkpoints.get(id).state = "aborted";
        emit("aborted", "id", id);
        if (valve != null && valve == id) {
            openValve();
        }
    }

    private void abortPending() {
        for (long n : new TreeMap<>(checkpoints).keySet()) {
            Checkpoint cp = checkpoints.get(n);
            if ("taken".equals(cp.state) || "barrier".equals(cp.state)) {
                cp.state = "aborted";
                emit("aborted", "id", n);
            }
        }
    }

    // ---- failover ----

    /** SRC-20..SRC-24: the reader restarts from the last completed checkpoint; Flink's tracker gives
     * back its splits assigned after it (SourceCoordinator.subtaskReset). */
    private void fail(int r) {
        emit("reset", "tasks", List.of(r));
        abortPending();
        Reader old = readers.get(r);
        old.registered = false;
        old.held = new ArrayList<>();
        old.splits = new ArrayList<>();
        if (valve != null) {
            openValve();
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
        noMore.remove(r);
        List<Integer> back = tracker.takeBack(r, lastCompleted);
        emit("splits_back", "reader", r, "splits", back);
        queue.addAll(back);  // SRC-24
    }

    /** SRC-27, SRC-28, SRC-29: everything from the last completed checkpoint, a new tracker. */
    private void globalFailover(String cause) {
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
        if (cp != null) {
            queue = new ArrayList<>(cp.queue);
            discovered = cp.discovered;
        } else {
            queue = new ArrayList<>();
            for (int s = 0; s < initialSplits; s++) {
                queue.add(s);
            }
            discovered = initialSplits;
        }
        noMore = new HashSet<>();
        tracker = new SourcesEngine.Tracker();
        valve = null;
    }

    /** SRC-44, SRC-38: run to completion, the final checkpoint commits everything. */
    private void end() throws Exception {
        for (int r = 0; r < readers.size(); r++) {
            if (!readers.get(r).registered) {
                register(r);
            }
        }
        while (!readers.stream().allMatch(x -> x.ended)) {
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
                    request(r);
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
