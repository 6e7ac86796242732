package org.flinksemantics.engine;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.runtime.execution.ExecutionState;
import org.apache.flink.runtime.executiongraph.failover.RestartPipelinedRegionFailoverStrategy;
import org.apache.flink.runtime.executiongraph.failover.SchedulingPipelinedRegionComputeUtil;
import org.apache.flink.runtime.io.network.partition.ResultPartitionType;
import org.apache.flink.runtime.jobgraph.IntermediateDataSetID;
import org.apache.flink.runtime.jobgraph.IntermediateResultPartitionID;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.scheduler.SchedulingTopologyListener;
import org.apache.flink.runtime.scheduler.strategy.ConsumedPartitionGroup;
import org.apache.flink.runtime.scheduler.strategy.ConsumerVertexGroup;
import org.apache.flink.runtime.scheduler.strategy.ExecutionVertexID;
import org.apache.flink.runtime.scheduler.strategy.ResultPartitionState;
import org.apache.flink.runtime.scheduler.strategy.SchedulingExecutionVertex;
import org.apache.flink.runtime.scheduler.strategy.SchedulingPipelinedRegion;
import org.apache.flink.runtime.scheduler.strategy.SchedulingResultPartition;
import org.apache.flink.runtime.scheduler.strategy.SchedulingTopology;

/**
 * The job graph of a sources schedule (readers 0.. and the other tasks, spec/sources.md) as the
 * scheduler sees it: a SchedulingTopology of one execution vertex per task and one result partition
 * per edge (PIPELINED or BLOCKING), whose pipelined regions Flink's SchedulingPipelinedRegionComputeUtil
 * computes (SRC-35: pipelined edges join, regions on a cycle of blocking edges merge), and whose
 * failover Flink's RestartPipelinedRegionFailoverStrategy decides (SRC-36), with a
 * ResultPartitionAvailabilityChecker that reports the blocking results of the step's `lost` tasks as
 * lost. The topology's classes are the scheduler's data, none of the rules: DefaultExecutionTopology
 * builds them from an ExecutionGraph, which a schedule does not have.
 */
final class SourcesRegions {

    private final List<Vertex> vertices = new ArrayList<>();
    private final Map<ExecutionVertexID, Vertex> byId = new HashMap<>();
    private final Map<IntermediateResultPartitionID, Partition> partitions = new HashMap<>();
    private final Map<ExecutionVertexID, Region> regionOf = new HashMap<>();
    private final Set<IntermediateResultPartitionID> lost = new HashSet<>();
    private final RestartPipelinedRegionFailoverStrategy strategy;

    SourcesRegions(int tasks, List<int[]> pipelined, List<int[]> blocking) {
        for (int t = 0; t < tasks; t++) {
            Vertex v = new Vertex(t, new ExecutionVertexID(new JobVertexID(), 0));
            vertices.add(v);
            byId.put(v.id, v);
        }
        for (int[] e : pipelined) {
            edge(e[0], e[1], ResultPartitionType.PIPELINED);
        }
        for (int[] e : blocking) {
            edge(e[0], e[1], ResultPartitionType.BLOCKING);
        }
        Topology topology = new Topology();
        for (Set<SchedulingExecutionVertex> members : SchedulingPipelinedRegionComputeUtil.computePipelinedRegions(
                vertices, byId::get, partitions::get)) {
            Region region = new Region(members);
            for (SchedulingExecutionVertex v : members) {
                regionOf.put(v.getId(), region);
            }
        }
        strategy = new RestartPipelinedRegionFailoverStrategy(topology, id -> !lost.contains(id));
    }

    private void edge(int producer, int consumer, ResultPartitionType type) {
        Vertex from = vertices.get(producer);
        Vertex to = vertices.get(consumer);
        Partition p = new Partition(new IntermediateResultPartitionID(new IntermediateDataSetID(), 0), from, type);
        p.consumers.add(ConsumerVertexGroup.fromSingleVertex(to.id, type));
        ConsumedPartitionGroup group = ConsumedPartitionGroup.fromSinglePartition(1, p.id, type);
        p.consumed.add(group);
        partitions.put(p.id, p);
        from.produced.add(p);
        to.consumed.add(group);
        to.consumedPartitions.add(p);
    }

    /** SRC-36: the tasks a failure of {@code failed} restarts when the blocking results of {@code lostTasks} are lost. */
    List<Integer> restart(int failed, List<Integer> lostTasks) {
        lost.clear();
        for (int t : lostTasks) {
            for (Partition p : vertices.get(t).produced) {
                if (p.type == ResultPartitionType.BLOCKING) {
                    lost.add(p.id);
                }
            }
        }
        List<Integer> out = new ArrayList<>();
        for (ExecutionVertexID id : strategy.getTasksNeedingRestart(vertices.get(failed).id,
                new Exception("task " + failed + " failed"))) {
            out.add(byId.get(id).task);
        }
        out.sort(null);
        return out;
    }

    /** One task: an execution vertex, running. */
    private static final class Vertex implements SchedulingExecutionVertex {
        final int task;
        final ExecutionVertexID id;
        final List<Partition> produced = new ArrayList<>();
        final List<Partition> consumedPartitions = new ArrayList<>();
        final List<ConsumedPartitionGroup> consumed = new ArrayList<>();

        Vertex(int task, ExecutionVertexID id) {
            this.task = task;
            this.id = id;
        }

        @Override
        public ExecutionVertexID getId() {
            return id;
        }

        @Override
        public Iterable<Partition> getConsumedResults() {
            return consumedPartitions;
        }

        @Override
        public Iterable<Partition> getProducedResults() {
            return produced;
        }

        @Override
        public ExecutionState getState() {
            return ExecutionState.RUNNING;
        }

        @Override
        public List<ConsumedPartitionGroup> getConsumedPartitionGroups() {
            return consumed;
        }
    }

    /** One edge's result partition. */
    private static final class Partition implements SchedulingResultPartition {
        final IntermediateResultPartitionID id;
        final Vertex producer;
        final ResultPartitionType type;
        final List<ConsumerVertexGroup> consumers = new ArrayList<>();
        final List<ConsumedPartitionGroup> consumed = new ArrayList<>();

        Partition(IntermediateResultPartitionID id, Vertex producer, ResultPartitionType type) {
            this.id = id;
            this.producer = producer;
            this.type = type;
        }

        @Override
        public IntermediateResultPartitionID getId() {
            return id;
        }

        @Override
        public ResultPartitionType getResultType() {
            return type;
        }

        @Override
        public Vertex getProducer() {
            return producer;
        }

        @Override
        public IntermediateDataSetID getResultId() {
            return id.getIntermediateDataSetID();
        }

        @Override
        public ResultPartitionState getState() {
            return ResultPartitionState.ALL_DATA_PRODUCED;
        }

        @Override
        public List<ConsumerVertexGroup> getConsumerVertexGroups() {
            return consumers;
        }

        @Override
        public List<ConsumedPartitionGroup> getConsumedPartitionGroups() {
            return consumed;
        }
    }

    /** A pipelined region as Flink's compute util found it. */
    private static final class Region implements SchedulingPipelinedRegion {
        final Map<ExecutionVertexID, SchedulingExecutionVertex> members = new HashMap<>();

        Region(Set<SchedulingExecutionVertex> vertices) {
            for (SchedulingExecutionVertex v : vertices) {
                members.put(v.getId(), v);
            }
        }

        @Override
        public Iterable<SchedulingExecutionVertex> getVertices() {
            return members.values();
        }

        @Override
        public SchedulingExecutionVertex getVertex(ExecutionVertexID id) {
            return members.get(id);
        }

        @Override
        public boolean contains(ExecutionVertexID id) {
            return members.containsKey(id);
        }

        @Override
        public Iterable<ConsumedPartitionGroup> getAllNonPipelinedConsumedPartitionGroups() {
            throw new UnsupportedOperationException("not read by the failover strategy");
        }

        @Override
        public Iterable<ConsumedPartitionGroup> getAllReleaseBySchedulerConsumedPartitionGroups() {
            throw new UnsupportedOperationException("not read by the failover strategy");
        }
    }

    /** The scheduler's view: vertices, partitions, and the region of each vertex. */
    private final class Topology implements SchedulingTopology {
        @Override
        public Iterable<Vertex> getVertices() {
            return vertices;
        }

        @Override
        public SchedulingExecutionVertex getVertex(ExecutionVertexID id) {
            return byId.get(id);
        }

        @Override
        public SchedulingResultPartition getResultPartition(IntermediateResultPartitionID id) {
            return partitions.get(id);
        }

        @Override
        public Iterable<Region> getAllPipelinedRegions() {
            return new HashSet<>(regionOf.values());
        }

        @Override
        public SchedulingPipelinedRegion getPipelinedRegionOfVertex(ExecutionVertexID id) {
            return regionOf.get(id);
        }

        @Override
        public void registerSchedulingTopologyListener(SchedulingTopologyListener listener) {
        }
    }
}
