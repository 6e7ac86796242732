package org.flinksemantics.engine;

import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkAlignmentParams;
import org.apache.flink.runtime.executiongraph.ExecutionAttemptID;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.messages.Acknowledge;
import org.apache.flink.runtime.operators.coordination.CoordinatorStoreImpl;
import org.apache.flink.runtime.operators.coordination.OperatorCoordinator;
import org.apache.flink.runtime.operators.coordination.OperatorEvent;
import org.apache.flink.runtime.source.coordinator.SourceCoordinator;
import org.apache.flink.runtime.source.coordinator.SourceCoordinatorContext;
import org.apache.flink.runtime.source.coordinator.SourceCoordinatorProvider;

/**
 * Flink's {@link SourceCoordinator} with the schedule's WatermarkAlignmentParams (WM-22..WM-24): it
 * keeps each reader's ReportedWatermarkEvent (handleEventFromOperator, in its own coordinator thread)
 * and its announceCombinedWatermark sends the WatermarkAlignmentEvent to every reader that reported.
 * Glue: the OperatorCoordinator.Context (a proxy), each reader's SubtaskGateway (events kept in the
 * reader's inbox until the harness hands them to its SourceOperator, on the harness's thread), and
 * the announce timer: the coordinator schedules it on the wall clock with an update interval that
 * never comes ({@link WatermarksAligned#UPDATE_MS}); an `align` step runs announceCombinedWatermark
 * in the coordinator thread, as that timer does (C4).
 */
final class WatermarksCoordinator implements AutoCloseable {

    static final long GUARD_S = 30;

    final List<List<OperatorEvent>> inbox = new ArrayList<>();
    final SourceCoordinator<WatermarksSource.Split, Void> coordinator;
    private final SourceCoordinatorContext<WatermarksSource.Split> context;
    volatile Throwable failure;

    WatermarksCoordinator(int parallelism, WatermarksSource source, WatermarkAlignmentParams params)
            throws Exception {
        JobID job = new JobID();
        OperatorID operator = new OperatorID();
        CoordinatorStoreImpl store = new CoordinatorStoreImpl();
        OperatorCoordinator.Context ctx = (OperatorCoordinator.Context) Proxy.newProxyInstance(
                WatermarksCoordinator.class.getClassLoader(), new Class<?>[] {OperatorCoordinator.Context.class},
                (p, m, a) -> switch (m.getName()) {
                    case "getJobID" -> job;
                    case "getOperatorId" -> operator;
                    case "currentParallelism" -> parallelism;
                    case "getUserCodeClassloader" -> WatermarksCoordinator.class.getClassLoader();
                    case "getCoordinatorStore" -> store;
                    case "isConcurrentExecutionAttemptsSupported" -> false;  // WM-27
                    case "failJob" -> {
                        failure = (Throwable) a[0];
                        yield null;
                    }
                    case "hashCode" -> System.identityHashCode(p);
                    case "equals" -> p == a[0];
                    case "toString" -> "watermarks coordinator context";
                    default -> AsyncIoTask.neutral(m.getReturnType(), new AsyncIoTask.Restore(t -> failure = t,
                            null, 0L));
                });
        Constructor<SourceCoordinatorProvider.CoordinatorExecutorThreadFactory> threads =
                SourceCoordinatorProvider.CoordinatorExecutorThreadFactory.class.getDeclaredConstructor(String.class,
                        OperatorCoordinator.Context.class);
        threads.setAccessible(true);
        context = new SourceCoordinatorContext<>(job, threads.newInstance("watermarks-coordinator", ctx), 1, ctx,
                WatermarksSource.SPLITS, false);
        coordinator = new SourceCoordinator<>(job, "watermarks", source, context, store, params, null);
        coordinator.start();
        settle("starting the coordinator");
        for (int r = 0; r < parallelism; r++) {
            inbox.add(new ArrayList<>());
            coordinator.executionAttemptReady(r, 0, gateway(r));
        }
        settle("the readers' gateways");
    }

    private OperatorCoordinator.SubtaskGateway gateway(int r) {
        ExecutionAttemptID id = ExecutionAttemptID.randomId();
        return new OperatorCoordinator.SubtaskGateway() {
            @Override
            public CompletableFuture<Acknowledge> sendEvent(OperatorEvent event) {
                synchronized (inbox) {
                    inbox.get(r).add(event);
                }
                return CompletableFuture.completedFuture(Acknowledge.get());
            }

            @Override
            public ExecutionAttemptID getExecution() {
                return id;
            }

            @Override
            public int getSubtask() {
                return r;
            }
        };
    }

    /** What reader r's SourceOperator sent (registration, ReportedWatermarkEvent), handled by the coordinator. */
    void fromOperator(int r, OperatorEvent event) throws Exception {
        coordinator.handleEventFromOperator(r, 0, event);
        settle(event + " from reader " + r);
    }

    /** WM-23: the announce timer fires (SourceCoordinator.announceCombinedWatermark, package-private). */
    void announce() throws Exception {
        Method announce = SourceCoordinator.class.getDeclaredMethod("announceCombinedWatermark");
        announce.setAccessible(true);
        context.runInCoordinatorThread(() -> {
            try {
                announce.invoke(coordinator);
            } catch (ReflectiveOperationException e) {
                failure = e;
            }
        });
        settle("an announcement");
    }

    /** The events for reader r, taken. */
    List<OperatorEvent> take(int r) {
        synchronized (inbox) {
            List<OperatorEvent> out = new ArrayList<>(inbox.get(r));
            inbox.get(r).clear();
            return out;
        }
    }

    private void settle(String step) throws Exception {
        try {
            coordinator.getCoordinatorExecutor().submit(() -> { }).get(GUARD_S, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            throw new IllegalStateException("watermarks engine: Flink's coordinator thread did not finish "
                    + step + " within " + GUARD_S + " s", e);
        }
        if (failure != null) {
            throw new IllegalStateException("watermarks engine: Flink's coordinator failed the job at " + step,
                    failure);
        }
    }

    @Override
    public void close() throws Exception {
        Thread closer = new Thread(() -> {
            try {
                coordinator.close();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }, "watermarks-coordinator-close");
        closer.start();
        closer.join(TimeUnit.SECONDS.toMillis(GUARD_S));
    }
}
