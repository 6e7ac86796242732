package org.flinksemantics.engine;

import java.lang.reflect.Constructor;
import java.util.Collection;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.async.AsyncFunction;
import org.apache.flink.streaming.api.functions.async.AsyncRetryStrategy;
import org.apache.flink.streaming.api.operators.async.AsyncWaitOperatorFactory;
import org.apache.flink.streaming.api.operators.async.queue.OrderedStreamElementQueue;
import org.apache.flink.streaming.api.transformations.OneInputTransformation;
import org.apache.flink.streaming.util.retryable.AsyncRetryStrategies;
import org.apache.flink.streaming.util.retryable.RetryPredicates;

/**
 * How a user configures Flink's async I/O, for the async_io engine: the schedule's configuration goes
 * through the DataStream API (AsyncDataStream.orderedWait / unorderedWait and their *WithRetry forms,
 * on a StreamExecutionEnvironment's stream), so that Flink's own preconditions refuse what they refuse
 * (AIO-3: AsyncDataStream.addOperator, "Timeout should be configured when do async with retry."; AIO-1:
 * the operator's and the queues' capacity checks), and the operator is the one AsyncDataStream's
 * AsyncWaitOperatorFactory creates. Retry strategies are Flink's AsyncRetryStrategies with
 * RetryPredicates (AIO-4, AIO-33, AIO-40).
 */
final class AsyncIoFlinkApi {

    private AsyncIoFlinkApi() {
    }

    /** The factory AsyncDataStream puts on the transformation for this configuration (no job is run). */
    @SuppressWarnings("unchecked")
    static AsyncWaitOperatorFactory<Integer, long[]> factory(AsyncFunction<Integer, long[]> function, long timeout,
            int capacity, boolean unordered, AsyncRetryStrategy<long[]> retry) {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1);
        DataStream<Integer> in = env.fromData(0);
        SingleOutputStreamOperator<long[]> out;
        if (retry == null) {
            out = unordered ? AsyncDataStream.unorderedWait(in, function, timeout, TimeUnit.MILLISECONDS, capacity)
                    : AsyncDataStream.orderedWait(in, function, timeout, TimeUnit.MILLISECONDS, capacity);
        } else {
            out = unordered
                    ? AsyncDataStream.unorderedWaitWithRetry(in, function, timeout, TimeUnit.MILLISECONDS, capacity, retry)
                    : AsyncDataStream.orderedWaitWithRetry(in, function, timeout, TimeUnit.MILLISECONDS, capacity, retry);
        }
        return (AsyncWaitOperatorFactory<Integer, long[]>)
                ((OneInputTransformation<Integer, long[]>) out.getTransformation()).getOperatorFactory();
    }

    /** AIO-1: a restore step's capacity, checked by Flink's queue (checkArgument(capacity > 0)). */
    static void checkCapacity(int capacity) {
        new OrderedStreamElementQueue<long[]>(capacity);
    }

    /**
     * AIO-4, AIO-33, AIO-40: Flink's strategy for the schedule's retry; null for none. The builders
     * (FixedDelayRetryStrategyBuilder, ExponentialBackoffDelayRetryStrategyBuilder) are used as a user
     * would. FixedDelayRetryStrategyBuilder refuses maxAttempts 0 ("maxAttempts should be greater than
     * zero.") and a delay of 0 ("backoffTimeMillis should be greater than zero."), which the spec
     * accepts (spec/areas/async_io.py: both non-negative); for those two the engine builds the same class,
     * FixedDelayRetryStrategy, through its private constructor (a user's own AsyncRetryStrategy can have
     * them too: the operator accepts any strategy), so the operator's behaviour with them is Flink's.
     */
    static AsyncRetryStrategy<long[]> retryStrategy(Map<String, Object> retry) throws Exception {
        if (retry == null) {
            return null;
        }
        int attempts = ((Number) retry.getOrDefault("max_attempts", 1)).intValue();
        Predicate<Collection<long[]>> ifEmpty = Boolean.TRUE.equals(retry.get("if_empty"))
                ? RetryPredicates.EMPTY_RESULT_PREDICATE : null;
        Predicate<Throwable> ifError = Boolean.TRUE.equals(retry.get("if_error"))
                ? RetryPredicates.HAS_EXCEPTION_PREDICATE : null;
        if ("exponential_backoff".equals(retry.get("strategy"))) {
            var b = new AsyncRetryStrategies.ExponentialBackoffDelayRetryStrategyBuilder<long[]>(attempts,
                    ((Number) retry.getOrDefault("initial_delay", 0)).longValue(),
                    ((Number) retry.getOrDefault("max_delay", 0)).longValue(),
                    ((Number) retry.getOrDefault("multiplier", 2.0)).doubleValue());
            return b.ifResult(ifEmpty).ifException(ifError).build();
        }
        long delay = ((Number) retry.getOrDefault("delay", 0)).longValue();
        if (attempts > 0 && delay > 0) {
            return new AsyncRetryStrategies.FixedDelayRetryStrategyBuilder<long[]>(attempts, delay)
                    .ifResult(ifEmpty).ifException(ifError).build();
        }
        Constructor<?> c = AsyncRetryStrategies.FixedDelayRetryStrategy.class.getDeclaredConstructor(
                int.class, long.class, Predicate.class, Predicate.class);
        c.setAccessible(true);
        @SuppressWarnings("unchecked")
        AsyncRetryStrategy<long[]> strategy = (AsyncRetryStrategy<long[]>) c.newInstance(attempts, delay, ifEmpty, ifError);
        return strategy;
    }
}
