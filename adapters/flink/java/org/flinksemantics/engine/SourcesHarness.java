package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.operators.coordination.AcknowledgeCheckpointEvent;
import org.apache.flink.runtime.operators.coordination.OperatorEvent;
import org.apache.flink.streaming.runtime.io.DataInputStatus;
import org.apache.flink.util.SerializedValue;

/**
 * One schedule of the sources area: the JobManager's calls on Flink's coordinator (SourcesCoordinator)
 * and each reader attempt a task around Flink's SourceOperator with a sink on Flink's
 * TwoPhaseCommitSinkFunction chained to it (SourcesTask). This class turns steps into those calls and
 * keeps the trace; the decisions are Flink's classes' (which splits a reader gets and when, which
 * events wait, what goes back at a failover, what a reader restores and stores, which transactions
 * commit when), the enumerator's, reader's and sink's policies the project's connector (SourcesSource,
 * SourcesReader, SourcesSink).
 */
final class SourcesHarness implements AutoCloseable, SourcesReader.Events {

    /** One reader subtask: its deployed attempt (opened at its registration), what it restores. */
    static final class Reader {
        SourcesTask task;
        boolean open;
        boolean ended;
        Map<OperatorID, OperatorSubtaskState> restored;  // the state of its attempt (null: none)
        long restoredFrom = -1;
    }

    /** A checkpoint as the schedule drives it: its coordinator bytes, the readers' states, its state. */
    static final class Checkpoint {
        int discovered;
        Map<Integer, Map<OperatorID, OperatorSubtaskState>> readers = new HashMap<>();
        int parallelism;
        String state = "taken";
        byte[] bytes;  // SourceCoordinator.checkpointCoordinator's result
    }

    static final int END_ROUNDS = 100_000;  // hang guard of `end`

    final List<Map<String, Object>> events = new ArrayList<>();
    private final List<Integer> sizes;
    private final int initialSplits;
    private final boolean bounded;
    private final List<Reader> readers = new ArrayList<>();
    private int parallelism;
    private int discovered;
    private SourcesCoordinator coordinator;
    private Long awaitingBarrier;
    private final Map<Long, Checkpoint> checkpoints = new HashMap<>();
    private Long lastCompleted;
    private int step;
    private List<Integer> back;
    private Throwable taskFailure;
    private final SourcesSink.External external = new SourcesSink.External();

    private final SourcesRegions regions;  // null: no job graph (every reader a region of its own)

    SourcesHarness(int parallelism, List<Integer> sizes, boolean bounded, SourcesRegions regions) {
        this.regions = regions;
        this.sizes = new ArrayList<>(sizes);
        this.initialSplits = sizes.size();
        this.bounded = bounded;
        for (int r = 0; r < parallelism; r++) {
            readers.add(new Reader());
        }
        this.parallelism = parallelism;
        discovered = sizes.size();
    }

    /** Starts Flink's coordinator (-1: no restored checkpoint) and deploys every reader's task. */
    void start() throws Exception {
        coordinator = newCoordinator(initialQueue(), -1, null);
        for (int r = 0; r < parallelism; r++) {
            deploy(r, coordinator.attempt(r));
        }
    }

    /** Reader r's attempt is deployed: its operators restore their states (the sink commits, SRC-29). */
    private void deploy(int r, int attempt) throws Exception {
        Reader reader = readers.get(r);
        reader.task = new SourcesTask(r, parallelism, attempt, coordinator.source, reader.restored,
                reader.restoredFrom, external, record -> onRecord(r, record), t -> taskFailure = t);
    }

    private SourcesCoordinator newCoordinator(List<Integer> queue, long restoredId, byte[] bytes) throws Exception {
        SourcesSource source = new SourcesSource(queue, bounded, (r, splits) -> back = splits, sizes, this);
        return new SourcesCoordinator(parallelism, source, restoredId, bytes, this::deliver);
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
            case "request" -> request(num(s, "reader"));
            case "assign" -> coordinator.push(num(s, "reader"));
            case "discover" -> discover(num(s, "records"));
            case "poll" -> poll(num(s, "reader"), s.containsKey("records") ? num(s, "records") : 1);
            case "checkpoint" -> checkpoint(num(s, "id"), Boolean.TRUE.equals(s.get("fails")));
            case "barrier" -> barrier(num(s, "id"));
            case "complete" -> complete(num(s, "id"), !Boolean.FALSE.equals(s.get("notify")));
            case "abort" -> abort(num(s, "id"));
            case "fail" -> fail(num(s, "task"), ints(s.get("lost")));
            case "fail_enumerator" -> coordinator.failEnumerator();
            case "rescale" -> globalFailover("rescale", num(s, "readers"));  // SRC-31
            case "end" -> end();
            default -> throw new IllegalArgumentException("unknown step " + op);
        }
        if (taskFailure != null) {
            throw new IllegalStateException("sources engine: a reader's task failed", taskFailure);
        }
        if (coordinator.failure != null) {
            globalFailover(coordinator.failureCause(), parallelism);  // SRC-4, SRC-27: the holder's failJob
        }
    }

    static int num(Map<String, Object> s, String key) {
        return ((Number) s.get(key)).intValue();
    }

    static List<Integer> ints(Object list) {
        List<Integer> out = new ArrayList<>();
        if (list != null) {
            for (Object n : (List<?>) list) {
                out.add(((Number) n).intValue());
            }
        }
        return out;
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

    // ---- the readers' tasks ----

    /** SRC-2: the attempt runs; SourceOperator.open gives the reader its restored splits and registers it. */
    private void register(int r) throws Exception {
        Reader reader = readers.get(r);
        coordinator.attemptRunning(r);
        reader.task.open();
        reader.open = true;
        emit("registered", "reader", r, "splits", pairs(reader.task.reader().splits));
        forward(r);
    }

    /** What reader r's task sent to the coordinator, to Flink's holder, in order. */
    private void forward(int r) throws Exception {
        SourcesTask task = readers.get(r).task;
        while (!task.outbox.isEmpty()) {
            OperatorEvent event = task.outbox.remove(0);
            coordinator.fromOperator(r, event);
        }
    }

    /** SRC-6: the reader asks for a split (SourceReaderContext.sendSplitRequest). */
    private void request(int r) throws Exception {
        readers.get(r).task.reader().request();
        forward(r);
    }

    /** SRC-39: the external system has {@code records} more records for the reader; the task reads them. */
    private void poll(int r, int records) throws Exception {
        status(r, readers.get(r).task.emit(records));
    }

    /** SRC-32: SourceOperator's end of data is the reader's END_OF_INPUT. */
    private void status(int r, DataInputStatus status) {
        Reader reader = readers.get(r);
        if (status == DataInputStatus.END_OF_DATA && !reader.ended) {
            reader.ended = true;
            emit("end_of_input", "reader", r);
        }
    }

    private void onRecord(int r, int[] record) {
        emit("record", "reader", r, "split", record[0], "offset", record[1]);
    }

    /** An event Flink's gateway lets through reaches the reader's task (SRC-8, SRC-9); a reader that got
     * NoMoreSplits and owns no split is asked for input at once, as its task would (SRC-32). */
    private void deliver(int r, SerializedValue<OperatorEvent> event) throws Exception {
        Reader reader = readers.get(r);
        reader.task.dispatch(event);
        SourcesReader user = reader.task.reader();
        if (user.noMore && user.splits.isEmpty() && !reader.ended) {
            status(r, reader.task.emit(0));
        }
    }

    @Override
    public void assigned(int reader, int split) {
        emit("assigned", "reader", reader, "split", split);
    }

    @Override
    public void noMoreSplits(int reader) {
        emit("no_more_splits", "reader", reader);
    }

    @Override
    public void splitFinished(int reader, int split) {
        emit("split_finished", "reader", reader, "split", split);
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
        cp.parallelism = parallelism;
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
     * SRC-15, C3: the barrier reaches every reader, whose SourceOperator snapshots its list state (in
     * index order); then each task acknowledges the checkpoint to the coordinator (OperatorChain's
     * AcknowledgeCheckpointEvent), in index order, which opens its gateway (SRC-13). Flink fixes no order
     * across subtasks; this one is the reference model's.
     */
    private void barrier(long id) throws Exception {
        Checkpoint cp = checkpoints.get(id);
        awaitingBarrier = null;
        cp.state = "barrier";
        for (int r = 0; r < readers.size(); r++) {
            Map<OperatorID, OperatorSubtaskState> state = readers.get(r).task.snapshot(id);
            cp.readers.put(r, state);
            emit("reader_checkpoint", "id", id, "reader", r, "splits", SourcesTask.stored(state.get(SourcesTask.SOURCE)));
        }
        for (int r = 0; r < readers.size(); r++) {
            coordinator.fromOperator(r, new AcknowledgeCheckpointEvent(id));
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
            for (Reader reader : readers) {
                if (reader.open) {
                    reader.task.notifyComplete(id);  // the sinks commit their transactions up to N
                }
            }
            emit("committed", "checkpoint", id, "records", sorted(external.takeCommitted()));
        }
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

    /** Each reader subtask's next attempt at {@code newParallelism}, with its state in the last completed
     * checkpoint as Flink's scheduler assigns it (SourcesTask.redistribute, SRC-31). */
    private List<Reader> restarted(int newParallelism) {
        Checkpoint cp = lastCompleted == null ? null : checkpoints.get(lastCompleted);
        List<Map<OperatorID, OperatorSubtaskState>> states = cp == null ? null
                : SourcesTask.redistribute(cp.readers, cp.parallelism, newParallelism);
        List<Reader> out = new ArrayList<>();
        for (int r = 0; r < newParallelism; r++) {
            Reader fresh = new Reader();
            if (states != null) {
                fresh.restored = states.get(r);
                fresh.restoredFrom = lastCompleted;
            }
            out.add(fresh);
        }
        return out;
    }

    // ---- failover ----

    /**
     * SRC-20..SRC-24 (C4), SRC-35..SRC-37: the task fails; Flink's RestartPipelinedRegionFailoverStrategy
     * names the tasks to restart (SourcesRegions; without a job graph, the reader alone); the pending
     * checkpoints abort; each restarted reader's attempt ends and its subtask is reset to the last
     * completed checkpoint, in reader order: Flink's SourceCoordinator.subtaskReset gives back what its
     * tracker holds.
     */
    private void fail(int task, List<Integer> lost) throws Exception {
        List<Integer> restart = regions == null ? List.of(task) : regions.restart(task, lost);
        List<Integer> restarted = new ArrayList<>();
        for (int t : restart) {
            if (t < parallelism) {
                restarted.add(t);
            }
        }
        emit("reset", "tasks", restart);
        List<Long> aborted = abortPending();
        for (int r : restarted) {
            if (readers.get(r).open) {
                coordinator.attemptFailed(r);
            }
            readers.get(r).task = null;
        }
        for (long id : aborted) {
            abortInFlink(id);
        }
        List<Reader> next = restarted(parallelism);
        for (int r : restarted) {
            readers.set(r, next.get(r));
            deploy(r, coordinator.attempt(r) + 1);  // the attempt subtaskReset starts
            List<int[]> records = external.takeCommitted();  // SRC-29: the restored sink's commits
            if (!records.isEmpty()) {
                emit("committed", "checkpoint", lastCompleted, "records", sorted(records));
            }
            back = null;
            coordinator.subtaskReset(r, lastCompleted == null ? -1 : lastCompleted);
            if (back == null) {
                throw new IllegalStateException("sources engine: Flink's subtaskReset did not call addSplitsBack");
            }
            emit("splits_back", "reader", r, "splits", back);
        }
    }

    /** SRC-27, SRC-28, SRC-29, SRC-31: everything restarts from the last completed checkpoint, at
     * {@code newParallelism}: a new coordinator reset to its bytes (RecreateOnResetOperatorCoordinator),
     * every reader from its state in it. */
    private void globalFailover(String cause, int newParallelism) throws Exception {
        Long n = lastCompleted;
        emit("global_failover", "checkpoint", n, "cause", cause);
        abortPending();
        readers.clear();
        readers.addAll(restarted(newParallelism));
        parallelism = newParallelism;
        Checkpoint cp = n == null ? null : checkpoints.get(n);
        coordinator.close();
        coordinator = newCoordinator(initialQueue(), n == null ? -1 : n, cp == null ? null : cp.bytes);
        discovered = cp != null ? cp.discovered : initialSplits;
        awaitingBarrier = null;
        for (int r = 0; r < parallelism; r++) {
            deploy(r, coordinator.attempt(r));
        }
        List<int[]> records = external.takeCommitted();  // SRC-29: the restored sinks' commits
        if (!records.isEmpty()) {
            emit("committed", "checkpoint", n, "records", sorted(records));
        }
    }

    /** SRC-44, SRC-38 (C5): run to completion in rounds; the final checkpoint commits everything. */
    private void end() throws Exception {
        for (int r = 0; r < readers.size(); r++) {
            if (!readers.get(r).open) {
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
                List<int[]> owned = reader.task.reader().splits;
                if (!owned.isEmpty()) {
                    int left = 0;
                    for (int[] p : owned) {
                        left += sizes.get(p[0]) - p[1];
                    }
                    poll(r, left);
                } else {
                    request(r);
                }
            }
        }
        long last = checkpoints.keySet().stream().mapToLong(Long::longValue).max().orElse(0L);
        for (Reader reader : readers) {
            reader.task.finishWithFinalCheckpoint(last + 1);  // FLIP-147: the sinks commit everything
        }
        emit("committed", "checkpoint", null, "records", sorted(external.takeCommitted()));
        emit("finished");
    }
}
