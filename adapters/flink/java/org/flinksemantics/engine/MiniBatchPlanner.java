package org.flinksemantics.engine;

import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.ExplainDetail;
import org.apache.flink.table.api.TableEnvironment;

/**
 * MB-2 on Flink's planner itself: the checks that refuse a mini-batch configuration are the planner's
 * (StreamCommonSubGraphBasedOptimizer: "MiniBatch Latency must be greater than 0 ms."; the group
 * aggregation's translation, AggregateUtil.createMiniBatchTrigger: "table.exec.mini-batch.size must be
 * > 0."), not the runtime operators'. A configuration with mini-batch on and a latency or size that is
 * not positive is given to a TableEnvironment (flink-table-planner-loader), which plans the area's
 * query down to its execution plan (the JSON execution plan, so the aggregation is translated); what
 * it throws is the refusal. A configuration with both positive (or mini-batch off) is not asked: no
 * check of the planner refuses it, and starting the planner takes seconds.
 */
final class MiniBatchPlanner {

    static final String QUERY = "SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) FROM (VALUES (CAST(1 AS BIGINT), "
            + "CAST(1 AS BIGINT))) AS t(k, v) GROUP BY k";

    private MiniBatchPlanner() {
    }

    /** The planner's refusal of the job's configuration, or null when it plans the query. */
    static String refusal(MiniBatchJob job) {
        if (!job.enabled || (job.latency > 0 && job.size > 0)) {
            return null;
        }
        ClassLoader before = Thread.currentThread().getContextClassLoader();
        try {
            TableEnvironment env = TableEnvironment.create(EnvironmentSettings.inStreamingMode());
            env.getConfig().set("table.exec.mini-batch.enabled", "true");
            env.getConfig().set("table.exec.mini-batch.allow-latency", job.latency + " ms");
            env.getConfig().set("table.exec.mini-batch.size", String.valueOf(job.size));
            env.getConfig().set("table.optimizer.agg-phase-strategy", job.twoPhase ? "TWO_PHASE" : "ONE_PHASE");
            env.explainSql(QUERY, ExplainDetail.JSON_EXECUTION_PLAN);
            return null;
        } catch (RuntimeException refused) {
            Throwable cause = refused;
            while (cause.getCause() != null) {
                cause = cause.getCause();
            }
            return String.valueOf(cause.getMessage());
        } finally {
            Thread.currentThread().setContextClassLoader(before);
        }
    }
}
