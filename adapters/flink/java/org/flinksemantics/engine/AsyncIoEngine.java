package org.flinksemantics.engine;

import java.lang.reflect.Field;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeoutException;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.functions.async.AsyncFunction;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.StreamOperatorParameters;
import org.apache.flink.streaming.api.operators.async.AsyncWaitOperator;
import org.apache.flink.streaming.api.operators.async.queue.StreamElementQueue;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.OneInputStreamTask;
import org.apache.flink.streaming.runtime.tasks.StreamTaskActionExecutor;
import org.apache.flink.streaming.runtime.tasks.mailbox.MailboxExecutorImpl;
import org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailbox;
import org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailboxImpl;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.streaming.api.functions.async.AsyncRetryStrategy;
import org.apache.flink.streaming.util.retryable.AsyncRetryStrategies;
import org.apache.flink.streaming.util.retryable.RetryPredicates;
import org.apache.flink.util.OutputTag;

/**
 * The async_io area (spec/async-io.md) on Flink 2.3.0's {@link AsyncWaitOperator}, built with its
 * public constructor (AsyncDataStream's defaults: no retry strategy) inside a real OneInputStreamTask
 * ({@link AsyncIoTask}), its mailbox Flink's TaskMailboxImpl with MailboxExecutorImpl (drained after each
 * action, on this thread), its timers on {@link ManualTimeService} (the schedule's clock). The async
 * function keeps each call's ResultFuture; complete and error steps complete it. The task's input
 * channel is glue: its head waits while Flink's queue (the operator's StreamElementQueue) is full,
 * as the task's input waits while processElement yields (AIO-7). The failure AsyncWaitOperator reports
 * through Environment.failExternally ends the run. A retry configuration is Flink's AsyncRetryStrategies
 * builder (fixed delay or exponential backoff) with RetryPredicates' EMPTY_RESULT / HAS_EXCEPTION
 * predicates. Checkpoints and restores are not driven yet.
 */
public final class AsyncIoEngine implements AreaEngine {

    static final String NOT_YET = "not driven yet by this engine (issue 33 item 2): ";

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("async_io", null);
        c.put("async_io.ordered", null);
        c.put("async_io.unordered", null);
        c.put("async_io.watermarks", null);
        c.put("async_io.timeout", null);
        c.put("async_io.status", null);
        c.put("async_io.config_validation", null);
        c.put("async_io.retry", null);
        c.put("async_io.checkpoint", NOT_YET + "snapshotState/initializeState of AsyncWaitOperator's list state "
                + "need a checkpoint storage and a TaskStateManager restoring it, which the proxy environment "
                + "(AsyncIoTask) does not provide");
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception {
        Map<String, Object> config = (Map<String, Object>) schedule.getOrDefault("config", Map.of());
        List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
        for (Map<String, Object> step : steps) {
            String op = (String) step.get("op");
            if (op.equals("checkpoint") || op.equals("crash") || op.equals("restore")) {
                throw new UnsupportedOperationException(capabilities().get("async_io.checkpoint"));
            }
        }
        Job job;
        try {
            job = new Job(config);
        } catch (IllegalArgumentException refused) {  // AIO-1: the operator refuses the configuration
            return AreaEngine.rejected(refused.getMessage());
        }
        for (int i = 0; i < steps.size() && !job.failed; i++) {
            job.step(i, steps.get(i));
        }
        return job.events;
    }

    /** A record's call outcome thrown into ResultFuture.completeExceptionally by an error step. */
    static final class ScriptedError extends Exception {
        final int record;

        ScriptedError(int record, String message) {
            super(message);
            this.record = record;
        }
    }

    /** One schedule on one operator. */
    static final class Job implements AsyncFunction<Integer, long[]> {
        final List<Map<String, Object>> events = new ArrayList<>();
        final ManualTimeService time = new ManualTimeService();
        final TaskMailbox mailbox = new TaskMailboxImpl(Thread.currentThread());
        final Map<Integer, ResultFuture<long[]>> calls = new HashMap<>();
        final Map<Integer, Integer> attempts = new HashMap<>();
        final Deque<Object[]> channel = new ArrayDeque<>();
        final List<Long> timestamps = new ArrayList<>();
        final String onTimeout;
        final List<Long> timeoutResult = new ArrayList<>();
        final int capacity;
        final AsyncWaitOperator<Integer, long[]> operator;
        final StreamElementQueue<long[]> queue;
        int step;
        int lastTimeout = -1;
        int nullCompleted = -1;
        boolean ended;
        boolean finished;
        boolean failed;

        @SuppressWarnings("unchecked")
        Job(Map<String, Object> config) throws Exception {
            capacity = ((Number) config.getOrDefault("capacity", 100)).intValue();
            long timeout = ((Number) config.getOrDefault("timeout", 0)).longValue();
            onTimeout = (String) config.getOrDefault("on_timeout", "fail");
            for (Object v : (Collection<Object>) config.getOrDefault("timeout_result", List.of())) {
                timeoutResult.add(((Number) v).longValue());
            }
            AsyncDataStream.OutputMode mode = "unordered".equals(config.getOrDefault("mode", "ordered"))
                    ? AsyncDataStream.OutputMode.UNORDERED : AsyncDataStream.OutputMode.ORDERED;
            OneInputStreamTask<Object, Object> task = AsyncIoTask.create(this::onFail);
            StreamConfig streamConfig = new StreamConfig(new org.apache.flink.configuration.Configuration());
            streamConfig.setOperatorID(new OperatorID());
            streamConfig.setOperatorName("async_io");
            streamConfig.setupNetworkInputs(IntSerializer.INSTANCE);
            streamConfig.serializeAllConfigs();
            MailboxExecutorImpl executor = new MailboxExecutorImpl(mailbox, 0, StreamTaskActionExecutor.IMMEDIATE);
            StreamOperatorParameters<long[]> parameters =
                    new StreamOperatorParameters<>(task, streamConfig, new Collect(), () -> time, null, executor);
            operator = new AsyncWaitOperator<>(parameters, this, timeout, capacity, mode,
                    retryStrategy((Map<String, Object>) config.get("retry")), time, executor);
            operator.initializeState(task.createStreamTaskStateInitializer(null));
            operator.open();
            queue = queueOf(operator);
        }

        /** AIO-4, AIO-33, AIO-40: Flink's strategy builders and predicates for the schedule's retry. */
        @SuppressWarnings("unchecked")
        static AsyncRetryStrategy<long[]> retryStrategy(Map<String, Object> retry) {
            if (retry == null) {
                return AsyncRetryStrategies.NO_RETRY_STRATEGY;
            }
            int attempts = ((Number) retry.getOrDefault("max_attempts", 1)).intValue();
            boolean ifEmpty = Boolean.TRUE.equals(retry.get("if_empty"));
            boolean ifError = Boolean.TRUE.equals(retry.get("if_error"));
            if ("exponential_backoff".equals(retry.get("strategy"))) {
                var b = new AsyncRetryStrategies.ExponentialBackoffDelayRetryStrategyBuilder<long[]>(attempts,
                        ((Number) retry.getOrDefault("initial_delay", 0)).longValue(),
                        ((Number) retry.getOrDefault("max_delay", 0)).longValue(),
                        ((Number) retry.getOrDefault("multiplier", 2.0)).doubleValue());
                if (ifEmpty) {
                    b = b.ifResult(RetryPredicates.EMPTY_RESULT_PREDICATE);
                }
                if (ifError) {
                    b = b.ifException(RetryPredicates.HAS_EXCEPTION_PREDICATE);
                }
                return b.build();
            }
            var b = new AsyncRetryStrategies.FixedDelayRetryStrategyBuilder<long[]>(attempts,
                    ((Number) retry.getOrDefault("delay", 0)).longValue());
            if (ifEmpty) {
                b = b.ifResult(RetryPredicates.EMPTY_RESULT_PREDICATE);
            }
            if (ifError) {
                b = b.ifException(RetryPredicates.HAS_EXCEPTION_PREDICATE);
            }
            return b.build();
        }

        @SuppressWarnings("unchecked")
        static StreamElementQueue<long[]> queueOf(AsyncWaitOperator<Integer, long[]> operator) throws Exception {
            Field field = AsyncWaitOperator.class.getDeclaredField("queue");
            field.setAccessible(true);
            return (StreamElementQueue<long[]>) field.get(operator);
        }

        // ---- the async function: calls kept for the schedule to complete ----

        @Override
        public void asyncInvoke(Integer record, ResultFuture<long[]> future) {
            calls.put(record, future);
            int attempt = attempts.merge(record, 1, Integer::sum);
            events.add(AreaEngine.event(step, "invoke", "record", record, "attempt", attempt));  // AIO-9, AIO-35
        }

        @Override
        public void timeout(Integer record, ResultFuture<long[]> future) throws Exception {
            if (failed) {
                return;  // a failed task fires no more timers (ManualTimeService.advance fires all that are due)
            }
            events.add(AreaEngine.event(step, "timeout", "record", record));
            lastTimeout = record;
            if (onTimeout.equals("fail")) {
                AsyncFunction.super.timeout(record, future);  // AIO-28: Flink's default handler
            } else if (onTimeout.equals("complete")) {
                future.complete(results(record, timeoutResult));  // AIO-29
            }  // "ignore": AIO-30
        }

        static List<long[]> results(int record, List<Long> values) {
            List<long[]> out = new ArrayList<>();
            for (long v : values) {
                out.add(new long[] {record, v});
            }
            return out;
        }

        void onFail(Throwable failure) {
            if (failed) {
                return;
            }
            failed = true;
            Throwable cause = failure;
            while (cause.getCause() != null && !(cause instanceof ScriptedError)
                    && !(cause instanceof TimeoutException)) {
                cause = cause.getCause();
            }
            if (cause instanceof ScriptedError) {
                events.add(AreaEngine.event(step, "fail", "record", ((ScriptedError) cause).record,
                        "reason", cause.getMessage()));
            } else if (cause instanceof TimeoutException) {
                events.add(AreaEngine.event(step, "fail", "record", lastTimeout, "reason", "timeout"));
            } else {
                events.add(AreaEngine.event(step, "fail", "record", null, "reason", String.valueOf(cause)));
            }
        }

        // ---- steps ----

        @SuppressWarnings("unchecked")
        void step(int index, Map<String, Object> s) throws Exception {
            step = index;
            switch ((String) s.get("op")) {
                case "record":
                    Object ts = s.get("timestamp");
                    timestamps.add(ts == null ? null : ((Number) ts).longValue());
                    channel.add(new Object[] {"record", timestamps.size() - 1});
                    break;
                case "watermark":
                    channel.add(new Object[] {"watermark", ((Number) s.get("timestamp")).longValue()});
                    break;
                case "status":
                    channel.add(new Object[] {"status", Boolean.TRUE.equals(s.get("idle"))});
                    break;
                case "end":
                    channel.add(new Object[] {"end", null});
                    break;
                case "complete":
                    complete(((Number) s.get("record")).intValue(), (List<Object>) s.get("result"));
                    break;
                case "error":
                    int record = ((Number) s.get("record")).intValue();
                    ResultFuture<long[]> future = calls.get(record);
                    if (future != null) {
                        future.completeExceptionally(new ScriptedError(record, "error"));
                    }
                    break;
                case "advance":
                    time.advance(((Number) s.get("ms")).longValue());
                    break;
                default:
                    throw new IllegalArgumentException("not an async_io step: " + s);
            }
            settle();
        }

        void complete(int record, List<Object> result) {
            ResultFuture<long[]> future = calls.get(record);
            if (future == null) {
                return;
            }
            if (result == null) {
                nullCompleted = record;
                try {
                    future.complete((Collection<long[]>) null);  // AIO-20: Flink refuses a null collection
                } catch (RuntimeException refused) {  // thrown in the user function's call: the task fails
                    failTask(refused);
                }
                return;
            }
            List<Long> values = new ArrayList<>();
            for (Object v : result) {
                values.add(((Number) v).longValue());
            }
            future.complete(results(record, values));
        }

        /** The task failed on an exception thrown in its thread (the operator's own, or a null result's). */
        void failTask(Exception thrown) {
            if (!failed) {
                failed = true;
                boolean nullResult = thrown instanceof NullPointerException && nullCompleted >= 0;
                events.add(AreaEngine.event(step, "fail", "record", nullResult ? nullCompleted : null,
                        "reason", nullResult ? "null_result" : String.valueOf(thrown)));
            }
        }

        /** Runs the mailbox and the input channel until nothing more can happen. */
        void settle() throws Exception {
            while (!failed) {
                drainMailbox();
                if (failed) {
                    return;
                }
                if (!channel.isEmpty() && takeInput()) {
                    continue;
                }
                if (ended && !finished && queue.isEmpty()) {
                    operator.endInput();  // AIO-42, AIO-56
                    drainMailbox();
                    finished = true;
                    events.add(AreaEngine.event(step, "finished"));
                }
                return;
            }
        }

        void drainMailbox() throws Exception {
            while (!failed) {
                var mail = mailbox.tryTake(0);
                if (mail.isEmpty()) {
                    return;
                }
                try {
                    mail.get().run();
                } catch (Exception thrown) {  // a mail that throws fails the task, as StreamTask's mailbox loop does
                    failTask(thrown);
                }
            }
        }

        boolean takeInput() throws Exception {
            Object[] head = channel.peek();
            String kind = (String) head[0];
            if ((kind.equals("record") || kind.equals("watermark")) && queue.size() >= capacity) {
                return false;  // AIO-7: the head waits
            }
            channel.poll();
            switch (kind) {
                case "record":
                    int id = (Integer) head[1];
                    Long ts = timestamps.get(id);
                    operator.processElement(ts == null ? new StreamRecord<>(id) : new StreamRecord<>(id, ts));
                    break;
                case "watermark":
                    operator.processWatermark(new Watermark((Long) head[1]));
                    break;
                case "status":
                    operator.processWatermarkStatus((Boolean) head[1] ? WatermarkStatus.IDLE : WatermarkStatus.ACTIVE);
                    break;
                default:
                    ended = true;
            }
            return true;
        }

        /** The operator's output, as events. */
        final class Collect implements Output<StreamRecord<long[]>> {
            @Override
            public void collect(StreamRecord<long[]> r) {
                events.add(AreaEngine.event(step, "emit", "record", (int) r.getValue()[0], "value", r.getValue()[1],
                        "timestamp", r.hasTimestamp() ? r.getTimestamp() : null));
            }

            @Override
            public <X> void collect(OutputTag<X> tag, StreamRecord<X> r) {
            }

            @Override
            public void emitWatermark(Watermark w) {
                events.add(AreaEngine.event(step, "watermark", "timestamp", w.getTimestamp()));
            }

            @Override
            public void emitWatermarkStatus(WatermarkStatus s) {
                events.add(AreaEngine.event(step, "status", "idle", s.isIdle()));
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
}
