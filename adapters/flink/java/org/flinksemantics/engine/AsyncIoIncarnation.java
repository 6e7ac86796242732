package org.flinksemantics.engine;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeoutException;
import org.apache.flink.api.common.operators.MailboxExecutor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.SubTaskInitializationMetricsBuilder;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.streaming.api.functions.async.AsyncFunction;
import org.apache.flink.streaming.api.functions.async.AsyncRetryStrategy;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.StreamOperatorParameters;
import org.apache.flink.streaming.api.operators.async.AsyncWaitOperator;
import org.apache.flink.streaming.api.operators.async.AsyncWaitOperatorFactory;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OneInputStreamTask;
import org.apache.flink.streaming.runtime.tasks.StreamTaskActionExecutor;
import org.apache.flink.streaming.runtime.tasks.mailbox.Mail;
import org.apache.flink.streaming.runtime.tasks.mailbox.MailboxExecutorImpl;
import org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailbox;
import org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailboxImpl;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.util.FlinkRuntimeException;
import org.apache.flink.util.OutputTag;
import org.apache.flink.util.function.ThrowingRunnable;

/**
 * One incarnation of the async_io task (spec/async-io.md, "Incarnation"): Flink 2.3.0's
 * AsyncWaitOperator, created by the AsyncWaitOperatorFactory that AsyncDataStream configures
 * ({@link AsyncIoFlinkApi}), set up inside a real OneInputStreamTask ({@link AsyncIoTask}), its state
 * initialized by Flink's StreamTaskStateInitializer (from a checkpoint's OperatorSubtaskState on a
 * restore, whose elements Flink's open() replays), its mailbox Flink's TaskMailboxImpl with
 * MailboxExecutorImpl on this thread, its timers {@link AsyncIoTimers}.
 *
 * <p>The task thread's loop is glue: {@link #settle} runs mails, and takes the next input element
 * when there is no mail, as StreamTask's mailbox loop does with its default action. Where Flink's
 * operator waits (MailboxExecutor.yield: addToWorkQueue while the queue is full, AIO-7; endInput until
 * the queue is empty, AIO-42; open() replaying more elements than the capacity, AIO-47), the mailbox's
 * yield lets the schedule go on ({@link AsyncIoRun#act}) until a mail arrives, as a task's mailbox
 * waits for mails from other threads; no input is taken meanwhile, as in a task.
 */
final class AsyncIoIncarnation {

    final AsyncIoRun run;
    final TaskMailbox mailbox = new TaskMailboxImpl(Thread.currentThread());
    final MailboxExecutorImpl inner = new MailboxExecutorImpl(mailbox, 0, StreamTaskActionExecutor.IMMEDIATE);
    final Deque<Object[]> channel = new ArrayDeque<>();
    final Map<Integer, ResultFuture<long[]>> calls = new HashMap<>();
    final Map<Integer, Integer> attempts = new HashMap<>();
    final Map<Integer, Long> admissions = new HashMap<>();
    final AsyncWaitOperator<Integer, long[]> operator;
    int lastTimeout = -1;
    int nullCompleted = -1;
    boolean failed;

    /** A new incarnation, restoring {@code restored} (taken at {@code checkpoint}) unless it is null. */
    AsyncIoIncarnation(AsyncIoRun run, int capacity, OperatorSubtaskState restored, long checkpoint) throws Exception {
        this.run = run;
        AsyncRetryStrategy<long[]> retry = AsyncIoFlinkApi.retryStrategy(run.retry);
        AsyncWaitOperatorFactory<Integer, long[]> factory = AsyncIoFlinkApi.factory(new Calls(this), run.timeout,
                capacity, run.unordered, retry);
        OneInputStreamTask<Object, Object> task = AsyncIoTask.create(this::onFail, restored, checkpoint);
        StreamConfig config = new StreamConfig(new org.apache.flink.configuration.Configuration());
        config.setOperatorID(new OperatorID());
        config.setOperatorName("async_io");
        config.setupNetworkInputs(IntSerializer.INSTANCE);
        config.serializeAllConfigs();
        MailboxExecutor executor = new Yielding();
        factory.setProcessingTimeService(run.time);  // as StreamOperatorFactoryUtil does in a task
        factory.setMailboxExecutor(executor);
        operator = factory.createStreamOperator(
                new StreamOperatorParameters<>(task, config, new Collect(), () -> run.time, null, executor));
        run.live = this;
        run.time.mailbox = executor;
        operator.initializeState(task.createStreamTaskStateInitializer(new SubTaskInitializationMetricsBuilder(0L)));
        operator.open();  // AIO-46: Flink replays the restored elements here
    }

    void event(String kind, Object... fields) {
        if (!failed) {
            run.events.add(AreaEngine.event(run.step, kind, fields));
        }
    }

    // ---- the task's mailbox loop ----

    /** Runs mails, then input, until neither is left (the task's mailbox loop with its default action). */
    void settle() throws Exception {
        try {
            while (true) {
                if (failed) {
                    throw new AsyncIoRun.Unwind(AsyncIoIncarnation.this);
                }
                Optional<Mail> mail = mailbox.tryTake(TaskMailbox.MIN_PRIORITY);
                if (mail.isPresent()) {
                    mail.get().run();
                } else if (channel.isEmpty()) {
                    return;
                } else {
                    take(channel.poll());
                }
            }
        } catch (AsyncIoRun.Unwind u) {
            throw u;
        } catch (Exception thrown) {  // an exception out of the mailbox loop fails the task, as in StreamTask
            failTask(thrown);
            throw new AsyncIoRun.Unwind(AsyncIoIncarnation.this);
        }
    }

    /** The task's input: one element to the operator (AIO-7: it may wait inside for a slot). */
    void take(Object[] element) throws Exception {
        switch ((String) element[0]) {
            case "record":
                int id = (Integer) element[1];
                Long ts = run.timestamps.get(id);
                operator.processElement(ts == null ? new StreamRecord<>(id) : new StreamRecord<>(id, ts));
                break;
            case "watermark":
                operator.processWatermark(new Watermark((Long) element[1]));
                break;
            case "status":  // AIO-51
                operator.processWatermarkStatus((Boolean) element[1] ? WatermarkStatus.IDLE : WatermarkStatus.ACTIVE);
                break;
            case "checkpoint":  // AIO-44: an aligned barrier, between two input elements
                AsyncIoCheckpoints.take(this, (Long) element[1]);
                break;
            default:  // end of input: AIO-39, AIO-42, AIO-56
                AsyncIoCheckpoints.orderRetries(this);
                operator.endInput();
                event("finished");
        }
    }

    /** The mailbox executor the operator is given: Flink's, whose yield lets the schedule go on. */
    final class Yielding implements MailboxExecutor {
        @Override
        public void execute(MailOptions options, ThrowingRunnable<? extends Exception> command, String description,
                Object... args) {
            inner.execute(options, command, description, args);
        }

        @Override
        public void yield() throws InterruptedException {
            while (!mailbox.hasMail()) {
                if (failed || !act()) {
                    throw new AsyncIoRun.Unwind(AsyncIoIncarnation.this);  // the incarnation ended, or the schedule did
                }
            }
            if (failed) {
                throw new AsyncIoRun.Unwind(AsyncIoIncarnation.this);
            }
            inner.yield();
        }

        boolean act() {
            try {
                return run.act();
            } catch (RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw new FlinkRuntimeException(e);
            }
        }

        @Override
        public boolean tryYield() {
            return inner.tryYield();
        }

        @Override
        public boolean shouldInterrupt() {
            return inner.shouldInterrupt();
        }
    }

    // ---- the outside: calls, their completions, failures ----

    void invoked(int record, ResultFuture<long[]> future) {
        calls.put(record, future);
        int attempt = attempts.merge(record, 1, Integer::sum);
        if (attempt == 1) {
            admissions.put(record, (long) admissions.size());
        }
        event("invoke", "record", record, "attempt", attempt);  // AIO-9, AIO-35
    }

    /** The timeout handler; true when Flink's default handler (AIO-28) is to run. */
    boolean timedOut(int record, ResultFuture<long[]> future) {
        event("timeout", "record", record);
        lastTimeout = record;
        if (run.onTimeout.equals("complete")) {
            future.complete(results(record, run.timeoutResult));  // AIO-29
        }
        return run.onTimeout.equals("fail");  // "ignore": AIO-30
    }

    static List<long[]> results(int record, List<Long> values) {
        List<long[]> out = new ArrayList<>();
        for (long v : values) {
            out.add(new long[] {record, v});
        }
        return out;
    }

    /** A complete step: the record's outstanding call completes with the result (null: AIO-20). */
    @SuppressWarnings("unchecked")
    void complete(int record, List<Object> result) {
        ResultFuture<long[]> future = calls.get(record);
        if (future == null) {
            return;
        }
        if (result == null) {
            nullCompleted = record;
            try {
                future.complete((Collection<long[]>) null);
            } catch (RuntimeException refused) {
                // AIO-20: with retry, RetryableResultHandlerDelegator.complete refuses null at the call; the
                // exception goes to the caller (the client completing the future), not to the task
                nullCompleted = -1;
            }
            return;
        }
        List<Long> values = new ArrayList<>();
        for (Object v : result) {
            values.add(((Number) v).longValue());
        }
        future.complete(results(record, values));
    }

    /** An error step: the record's outstanding call completes exceptionally. */
    void error(int record) {
        ResultFuture<long[]> future = calls.get(record);
        if (future != null) {
            future.completeExceptionally(new ScriptedError(record));
        }
    }

    /** Environment.failExternally: how AsyncWaitOperator fails the task (AIO-23, AIO-28). */
    void onFail(Throwable failure) {
        Throwable cause = failure;
        while (cause.getCause() != null && !(cause instanceof ScriptedError) && !(cause instanceof TimeoutException)) {
            cause = cause.getCause();
        }
        if (cause instanceof ScriptedError) {
            event("fail", "record", ((ScriptedError) cause).record, "reason", "error");
        } else if (cause instanceof TimeoutException) {
            event("fail", "record", lastTimeout, "reason", "timeout");
        } else {
            event("fail", "record", null, "reason", String.valueOf(cause));
        }
        failed = true;  // AIO-58: the incarnation ends at once (D4)
    }

    /** The task failed on an exception thrown in its thread (a null result's: AIO-20). */
    void failTask(Exception thrown) {
        boolean nullResult = thrown instanceof NullPointerException && nullCompleted >= 0;
        event("fail", "record", nullResult ? nullCompleted : null,
                "reason", nullResult ? "null_result" : String.valueOf(thrown));
        failed = true;
    }

    /** A call's outcome given to ResultFuture.completeExceptionally by an error step. */
    static final class ScriptedError extends Exception {
        final int record;

        ScriptedError(int record) {
            super("error");
            this.record = record;
        }
    }

    /** The user's async function: keeps each call for the schedule to complete. */
    static final class Calls implements AsyncFunction<Integer, long[]> {
        private final transient AsyncIoIncarnation job;

        Calls(AsyncIoIncarnation job) {
            this.job = job;
        }

        @Override
        public void asyncInvoke(Integer record, ResultFuture<long[]> future) {
            job.invoked(record, future);
        }

        @Override
        public void timeout(Integer record, ResultFuture<long[]> future) throws Exception {
            if (job.timedOut(record, future)) {
                AsyncFunction.super.timeout(record, future);  // AIO-28: Flink's default handler
            }
        }
    }

    /** The operator's output, as events. */
    final class Collect implements Output<StreamRecord<long[]>> {
        @Override
        public void collect(StreamRecord<long[]> r) {
            event("emit", "record", (int) r.getValue()[0], "value", r.getValue()[1],
                    "timestamp", r.hasTimestamp() ? r.getTimestamp() : null);
        }

        @Override
        public <X> void collect(OutputTag<X> tag, StreamRecord<X> r) {
        }

        @Override
        public void emitWatermark(Watermark w) {
            event("watermark", "timestamp", w.getTimestamp());
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) {
            event("status", "idle", s.isIdle());
        }

        @Override
        public void emitLatencyMarker(LatencyMarker m) {
        }

        @Override
        public void emitRecordAttributes(RecordAttributes a) {
        }

        @Override
        public void emitWatermark(WatermarkEvent e) {
        }

        @Override
        public void close() {
        }
    }
}
