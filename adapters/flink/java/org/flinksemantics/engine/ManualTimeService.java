package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.streaming.runtime.tasks.ProcessingTimeService;
import org.apache.flink.util.clock.Clock;
import org.apache.flink.util.clock.ManualClock;

/**
 * A task's processing time on the schedule's virtual clock (glue for Flink's
 * {@link ProcessingTimeService}, which the task's timer thread drives in Flink): timers fire only
 * when {@link #advance} moves the clock past them, the earliest first, ties in the order they were
 * registered (spec/schedules.md, "Timers"), with the clock ({@link ManualClock}) set to each one's
 * time (never back: a timer registered for a past time fires at once, at the clock's time, and is
 * told its own time). By default the clock starts at a large offset, as a machine's clock does; the
 * mini_batch area starts it at 0, as the schedule's processing time does (spec/mini-batch.md: the
 * processing-time assigner's batches are {@code now - now % I}, so the clock's origin shows in the
 * trace). {@link #quiesce} (a crash) cancels every timer; the clock runs on.
 */
final class ManualTimeService implements ProcessingTimeService {

    static final long START_MS = 1_000_000_000L;

    private final long start;
    private final ManualClock clock;
    private final List<Timer> timers = new ArrayList<>();

    ManualTimeService() {
        this(START_MS);
    }

    ManualTimeService(long startMs) {
        this.start = startMs;
        this.clock = new ManualClock(startMs * 1_000_000L);
    }

    /** A timer, periodic when its period is positive. */
    final class Timer extends VirtualTimer {
        final ProcessingTimeCallback callback;
        long due;
        final long period;

        Timer(ProcessingTimeCallback callback, long due, long period) {
            this.callback = callback;
            this.due = due;
            this.period = period;
        }

        @Override
        long delayMs() {
            return due - getCurrentProcessingTime();
        }
    }

    @Override
    public long getCurrentProcessingTime() {
        return clock.absoluteTimeMillis();
    }

    @Override
    public Clock getClock() {
        return clock;
    }

    /** Schedule time: ms since the start. */
    long now() {
        return getCurrentProcessingTime() - start;
    }

    @Override
    public ScheduledFuture<?> registerTimer(long time, ProcessingTimeCallback callback) {
        Timer t = new Timer(callback, time, 0);
        timers.add(t);
        return t;
    }

    @Override
    public ScheduledFuture<?> scheduleAtFixedRate(ProcessingTimeCallback callback, long initialDelay, long period) {
        Timer t = new Timer(callback, getCurrentProcessingTime() + initialDelay, period);
        timers.add(t);
        return t;
    }

    @Override
    public ScheduledFuture<?> scheduleWithFixedDelay(ProcessingTimeCallback callback, long initialDelay, long period) {
        return scheduleAtFixedRate(callback, initialDelay, period);
    }

    @Override
    public java.util.concurrent.CompletableFuture<Void> quiesce() {
        timers.forEach(t -> t.cancel(false));
        timers.clear();
        return java.util.concurrent.CompletableFuture.completedFuture(null);
    }

    /** Moves the clock by ms, firing every timer due on the way (spec/schedules.md, "Timers"). */
    void advance(long ms) throws Exception {
        long target = getCurrentProcessingTime() + ms;
        while (true) {
            timers.removeIf(t -> t.cancelled);
            Timer next = null;
            for (Timer t : timers) {
                if (t.due <= target && (next == null || t.due < next.due)) {
                    next = t;
                }
            }
            if (next == null) {
                break;
            }
            long due = next.due;
            setTime(Math.max(due, getCurrentProcessingTime()));
            if (next.period > 0) {
                next.due += next.period;
            } else {
                next.cancelled = true;
            }
            next.callback.onProcessingTime(due);
        }
        setTime(target);
    }

    private void setTime(long ms) {
        clock.advanceTime(ms - getCurrentProcessingTime(), TimeUnit.MILLISECONDS);
    }
}
