package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Delayed;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.streaming.runtime.tasks.ProcessingTimeService;
import org.apache.flink.util.clock.Clock;
import org.apache.flink.util.clock.ManualClock;

/**
 * The mini_batch area's processing time on the schedule's clock (glue for Flink's
 * {@link ProcessingTimeService}, which a task's timer thread drives in Flink): the clock
 * ({@link ManualClock}) starts at 0, as the schedule's processing time does (spec/mini-batch.md: the
 * processing-time assigner's batches are {@code now - now % I}, so the clock's origin shows in the
 * trace, which ManualTimeService's large start would shift); timers fire only in {@link #advance},
 * the earliest first, ties in registration order, the clock set to each one's time. {@link #quiesce}
 * (a crash) cancels every timer; the clock runs on.
 */
final class MiniBatchTime implements ProcessingTimeService {

    private final ManualClock clock = new ManualClock(0);
    private final List<Timer> timers = new ArrayList<>();

    /** A one-shot timer. */
    final class Timer implements ScheduledFuture<Object> {
        final ProcessingTimeCallback callback;
        final long due;
        boolean cancelled;

        Timer(ProcessingTimeCallback callback, long due) {
            this.callback = callback;
            this.due = due;
        }

        @Override
        public long getDelay(TimeUnit unit) {
            return unit.convert(due - getCurrentProcessingTime(), TimeUnit.MILLISECONDS);
        }

        @Override
        public int compareTo(Delayed other) {
            return Long.compare(getDelay(TimeUnit.MILLISECONDS), other.getDelay(TimeUnit.MILLISECONDS));
        }

        @Override
        public boolean cancel(boolean interrupt) {
            cancelled = true;
            return true;
        }

        @Override
        public boolean isCancelled() {
            return cancelled;
        }

        @Override
        public boolean isDone() {
            return cancelled;
        }

        @Override
        public Object get() {
            return null;
        }

        @Override
        public Object get(long timeout, TimeUnit unit) {
            return null;
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

    @Override
    public ScheduledFuture<?> registerTimer(long time, ProcessingTimeCallback callback) {
        Timer t = new Timer(callback, time);
        timers.add(t);
        return t;
    }

    @Override
    public ScheduledFuture<?> scheduleAtFixedRate(ProcessingTimeCallback callback, long initialDelay, long period) {
        throw new UnsupportedOperationException("the mini-batch operators register one-shot timers only");
    }

    @Override
    public ScheduledFuture<?> scheduleWithFixedDelay(ProcessingTimeCallback callback, long initialDelay, long period) {
        throw new UnsupportedOperationException("the mini-batch operators register one-shot timers only");
    }

    @Override
    public CompletableFuture<Void> quiesce() {
        timers.forEach(t -> t.cancel(false));
        timers.clear();
        return CompletableFuture.completedFuture(null);
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
            setTime(Math.max(next.due, getCurrentProcessingTime()));
            next.cancelled = true;
            next.callback.onProcessingTime(next.due);
        }
        setTime(target);
    }

    private void setTime(long ms) {
        clock.advanceTime(ms - getCurrentProcessingTime(), TimeUnit.MILLISECONDS);
    }
}
