package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;

/**
 * One async_io schedule (spec/schedules.md, spec/async-io.md) on Flink's operator: the schedule's steps,
 * its clock ({@link AsyncIoTimers}), its checkpoints, and the live incarnation
 * ({@link AsyncIoIncarnation}), or none after a failure or a crash until a restore.
 *
 * <p>The schedule advances by actions ({@link #act}): a step's own action, then its due timers one at
 * a time (AIO-54: up to the advance's target, or up to now for the other steps, so a zero backoff fires
 * in the step that registered it), then the clock set to the target. Between two actions the task
 * settles (mails, then input); inside a yield of the operator, actions go on until a mail arrives.
 */
final class AsyncIoRun {

    /** Unwinds the task's stack at the end of an incarnation (failure, crash) or of the schedule. */
    static final class Unwind extends RuntimeException {
        final AsyncIoIncarnation ended;

        Unwind(AsyncIoIncarnation ended) {
            super("the incarnation ended", null, false, false);
            this.ended = ended;
        }
    }

    final List<Map<String, Object>> events = new ArrayList<>();
    final AsyncIoTimers time = new AsyncIoTimers();
    final Map<Long, OperatorSubtaskState> checkpoints = new HashMap<>();
    final List<Long> timestamps = new ArrayList<>();
    final List<Map<String, Object>> steps;
    final int capacity;
    final long timeout;
    final boolean unordered;
    final String onTimeout;
    final List<Long> timeoutResult = new ArrayList<>();
    final Map<String, Object> retry;
    AsyncIoIncarnation live;
    int step;
    private int cursor;
    private boolean started;
    private long target;

    @SuppressWarnings("unchecked")
    AsyncIoRun(Map<String, Object> config, List<Map<String, Object>> steps) {
        this.steps = steps;
        capacity = ((Number) config.getOrDefault("capacity", 100)).intValue();
        timeout = ((Number) config.getOrDefault("timeout", 0)).longValue();
        unordered = "unordered".equals(config.getOrDefault("mode", "ordered"));
        onTimeout = (String) config.getOrDefault("on_timeout", "fail");
        for (Object v : (Collection<Object>) config.getOrDefault("timeout_result", List.of())) {
            timeoutResult.add(((Number) v).longValue());
        }
        retry = (Map<String, Object>) config.get("retry");
    }

    /** The trace; a configuration Flink refuses gives the single rejected event (AIO-1, AIO-3). */
    List<Map<String, Object>> run() throws Exception {
        try {
            for (Map<String, Object> s : steps) {
                if ("restore".equals(s.get("op")) && s.get("capacity") != null) {
                    AsyncIoFlinkApi.checkCapacity(((Number) s.get("capacity")).intValue());
                }
            }
            new AsyncIoIncarnation(this, capacity, null, 0L);
        } catch (IllegalArgumentException refused) {
            return AreaEngine.rejected(refused.getMessage());
        }
        while (true) {
            try {
                if (live != null) {
                    live.settle();
                }
                if (!act()) {
                    return events;
                }
            } catch (Unwind ended) {  // AIO-58: its queue, waiting input and timers go with it
                if (ended.ended == live) {
                    live = null;
                    time.clear();
                }  // else an incarnation a restore replaced: its stack is gone now
            }
        }
    }

    /** Does the schedule's next action; false when the schedule is over. */
    boolean act() throws Exception {
        if (live != null && live.failed) {
            throw new Unwind(live);
        }
        if (cursor >= steps.size()) {
            return false;
        }
        if (!started) {
            started = true;
            step = cursor;
            target = time.now();
            perform(steps.get(cursor));
            return true;
        }
        AsyncIoTimers.Timer due = time.nextDue(target);
        if (due != null) {
            time.fire(due);
            return true;
        }
        time.setTime(target);
        cursor++;
        started = false;
        return true;
    }

    /** A step's own action. */
    @SuppressWarnings("unchecked")
    void perform(Map<String, Object> s) throws Exception {
        String op = (String) s.get("op");
        switch (op) {
            case "record":
                Object ts = s.get("timestamp");
                timestamps.add(ts == null ? null : ((Number) ts).longValue());
                input("record", timestamps.size() - 1);
                break;
            case "watermark":
                input("watermark", ((Number) s.get("timestamp")).longValue());
                break;
            case "status":
                input("status", Boolean.TRUE.equals(s.get("idle")));
                break;
            case "checkpoint":
                input("checkpoint", ((Number) s.get("id")).longValue());
                break;
            case "end":
                input("end", null);
                break;
            case "complete":
                if (live != null) {
                    live.complete(((Number) s.get("record")).intValue(), (List<Object>) s.get("result"));
                }
                break;
            case "error":
                if (live != null) {
                    live.error(((Number) s.get("record")).intValue());
                }
                break;
            case "advance":
                target = time.now() + ((Number) s.get("ms")).longValue();
                break;
            case "crash":  // AIO-58: the incarnation ends without a fail event
                if (live != null) {
                    throw new Unwind(live);
                }
                break;
            case "restore":
                restore(s);
                break;
            default:
                throw new IllegalArgumentException("not an async_io step: " + s);
        }
    }

    void input(String kind, Object value) {
        if (live != null) {  // AIO-25: no input is taken until a restore
            live.channel.add(new Object[] {kind, value});
        }
    }

    /** AIO-46, AIO-47, AIO-57: a new incarnation from the checkpoint (or from nothing), with its capacity. */
    void restore(Map<String, Object> s) throws Exception {
        if (live != null) {
            // the spec's task failed before (SCH-7) where Flink's did not (a divergence the suite reports):
            // a restore replaces the running task, silently, as a crash would
            live.failed = true;
            live = null;
            time.clear();
        }
        int cap = s.get("capacity") == null ? capacity : ((Number) s.get("capacity")).intValue();
        Object id = s.get("checkpoint");
        if (id == null) {
            new AsyncIoIncarnation(this, cap, null, 0L);
        } else {
            long checkpoint = ((Number) id).longValue();
            new AsyncIoIncarnation(this, cap, checkpoints.get(checkpoint), checkpoint);
        }
    }
}
