package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.operators.MailboxExecutor;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.streaming.runtime.tasks.ProcessingTimeService;
import org.apache.flink.util.clock.Clock;
import org.apache.flink.util.clock.ManualClock;

/**
 * The async_io task's processing time on the schedule's clock (glue standing in for the task's
 * timer thread and Flink's ProcessingTimeServiceImpl). As in a task, a due timer does not run its
 * callback itself: it puts the callback into the task's mailbox ({@link #fire}), and the mailbox runs
 * it. The driver ({@link AsyncIoRun}) fires ONE timer at a time, the earliest deadline first and in
 * registration order for equal deadlines, with the clock ({@link ManualClock}) set to its deadline,
 * and lets the task settle (mails, input) before the next one (AIO-54, spec/schedules.md "Timers").
 * A timer fires at its time, as in Flink's TestProcessingTimeService (D5 of spec/async-io.md: Flink
 * 2.3.0's SystemProcessingTimeService fires it 1 ms later). The clock starts at a large offset.
 */
final class AsyncIoTimers implements ProcessingTimeService {

    static final long START_MS = 1_000_000_000L;

    private final ManualClock clock = new ManualClock(START_MS * 1_000_000L);
    private final List<Timer> timers = new ArrayList<>();
    private long registrations;
    /** The mailbox of the live incarnation: where due timers put their callbacks. */
    MailboxExecutor mailbox;

    /** A one-shot timer: AsyncWaitOperator registers only these (timeouts and retry backoffs). */
    final class Timer extends VirtualTimer {
        final ProcessingTimeCallback callback;
        final long due;
        final long order;

        Timer(ProcessingTimeCallback callback, long due, long order) {
            this.callback = callback;
            this.due = due;
            this.order = order;
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

    @Override
    public ScheduledFuture<?> registerTimer(long time, ProcessingTimeCallback callback) {
        Timer t = new Timer(callback, time, registrations++);
        timers.add(t);
        return t;
    }

    @Override
    public ScheduledFuture<?> scheduleAtFixedRate(ProcessingTimeCallback callback, long initialDelay, long period) {
        throw new UnsupportedOperationException("AsyncWaitOperator registers one-shot timers only");
    }

    @Override
    public ScheduledFuture<?> scheduleWithFixedDelay(ProcessingTimeCallback callback, long initialDelay, long period) {
        throw new UnsupportedOperationException("AsyncWaitOperator registers one-shot timers only");
    }

    @Override
    public CompletableFuture<Void> quiesce() {
        clear();
        return CompletableFuture.completedFuture(null);
    }

    /** Schedule time: ms since the start. */
    long now() {
        return getCurrentProcessingTime() - START_MS;
    }

    /** The timer to fire next among those due at schedule time {@code target} or before; null if none. */
    Timer nextDue(long target) {
        timers.removeIf(t -> t.cancelled || t.done);
        Timer next = null;
        for (Timer t : timers) {
            if (t.due - START_MS <= target && (next == null || t.due < next.due
                    || (t.due == next.due && t.order < next.order))) {
                next = t;
            }
        }
        return next;
    }

    /** AIO-54: the clock moves to the timer's time (never back) and its callback goes into the mailbox. */
    void fire(Timer t) {
        setTime(Math.max(now(), t.due - START_MS));
        t.done = true;
        mailbox.execute(() -> t.callback.onProcessingTime(t.due), "timer callback");
    }

    /** Sets the clock to schedule time {@code ms} (never back). */
    void setTime(long ms) {
        long delta = ms - now();
        if (delta > 0) {
            clock.advanceTime(delta, TimeUnit.MILLISECONDS);
        }
    }

    /** The end of an incarnation: its timers go with it (AIO-58). */
    void clear() {
        timers.clear();
    }
}
