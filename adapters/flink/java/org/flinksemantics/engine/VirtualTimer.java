package org.flinksemantics.engine;

import java.util.concurrent.Delayed;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * The future of a timer on the schedule's virtual clock, as the engines' processing-time services
 * ({@link ManualTimeService}, {@link AsyncIoTimers}, the sources task's) hand it to Flink's
 * operators: cancellable, done once fired or cancelled, never waited on (glue: in Flink the task's
 * timer thread keeps these).
 */
abstract class VirtualTimer implements ScheduledFuture<Object> {

    boolean cancelled;
    boolean done;

    /** Milliseconds until the timer is due on its clock ({@link Long#MAX_VALUE}: never). */
    abstract long delayMs();

    @Override
    public long getDelay(TimeUnit unit) {
        return unit.convert(delayMs(), TimeUnit.MILLISECONDS);
    }

    @Override
    public int compareTo(Delayed other) {
        return Long.compare(getDelay(TimeUnit.MILLISECONDS), other.getDelay(TimeUnit.MILLISECONDS));
    }

    @Override
    public boolean cancel(boolean interrupt) {
        cancelled = true;
        return !done;
    }

    @Override
    public boolean isCancelled() {
        return cancelled;
    }

    @Override
    public boolean isDone() {
        return cancelled || done;
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
