package org.flinksemantics.engine;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.StateAssignmentOperation;
import org.apache.flink.runtime.executiongraph.ExecutionJobVertex;
import org.apache.flink.runtime.executiongraph.InternalExecutionGraphAccessor;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.scheduler.SchedulerBase;
import org.apache.flink.runtime.scheduler.VertexParallelismInformation;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.types.Row;
import org.apache.flink.util.MathUtils;

/**
 * The key groups area (spec/key-groups.md) on Flink 2.3.0's classes. An update is routed by
 * {@link KeyGroupRangeAssignment#assignKeyToParallelOperator} (KG-3, KG-6; its null check is KG-7),
 * its key group is {@link KeyGroupRangeAssignment#assignToKeyGroup} (KG-1) and its hash
 * {@link MathUtils#murmurHash} of the key's hashCode (KG-2, KG-11; profile pyflink: of
 * {@code Row.of(key)}, KG-33); the sum lives in the subtask's heap keyed state backend, which
 * computes the key group again and refuses a key outside its range (KG-5, KG-6). The parallelism and
 * maximum parallelism of a job are what Flink's scheduler settles
 * ({@link SchedulerBase#computeVertexParallelismStore}: KG-9, KG-10), bounded by
 * KeyGroupRangeAssignment's checks (KG-8, C1); a restore makes Flink's checks in Flink's order (C7)
 * on the new job's {@link ExecutionJobVertex}: Checkpoints.loadAndValidateCheckpoint's condition
 * (KG-16), then StateAssignmentOperation's own checkParallelismPreconditions (KG-15, and the vertex
 * taking the checkpoint's maximum parallelism). Checkpoints and restores: {@link KeyGroupsJob}.
 */
public final class KeyGroupsEngine implements AreaEngine {

    static final String REFUSED_PARALLELISM = "parallelism out of bounds";
    static final String REFUSED_ABOVE_MAX = "parallelism above the checkpoint's max parallelism";
    static final String REFUSED_MAX_CHANGED = "max parallelism changed";
    static final List<String> TYPE_ORDER = List.of("int", "long", "string");

    @Override
    public Map<String, String> capabilities() {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("key_groups", null);
        c.put("key_groups.pyflink_hash", null);
        c.put("key_groups.spark_hash", "Flink 2.3.0 has no Spark hash: the spark profile is Spark's hash() "
                + "(Murmur3_x86_32 of spark-unsafe, KG-22..KG-30), which no class of Flink's jars computes");
        c.put("key_groups.operator_state", null);
        c.put("key_groups.restore", null);
        c.put("key_groups.rescale", null);
        c.put("key_groups.many_subtasks", null);
        c.put("key_groups.lone_surrogates", null);
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> run(Map<String, Object> schedule) throws Exception {
        Map<String, Object> config = (Map<String, Object>) schedule.getOrDefault("config", Map.of());
        String profile = (String) config.getOrDefault("hash", "flink");
        if (profile.equals("spark")) {
            throw new UnsupportedOperationException(capabilities().get("key_groups.spark_hash"));
        }
        int parallelism = ((Number) config.getOrDefault("parallelism", 1)).intValue();
        Integer explicit = integer(config.get("max_parallelism"));
        ExecutionJobVertex settled;
        try {
            settled = settle(parallelism, explicit);
        } catch (IllegalArgumentException e) {  // KG-8, C1: Flink refuses the job's configuration
            return AreaEngine.rejected(e.getMessage());
        }
        Run run = new Run(profile.equals("pyflink"),
                new KeyGroupsJob(parallelism, settled.getMaxParallelism(), profile.equals("pyflink"), Map.of()));
        try {
            List<Map<String, Object>> steps = (List<Map<String, Object>>) schedule.getOrDefault("steps", List.of());
            for (int i = 0; i < steps.size(); i++) {
                run.step(i, steps.get(i));
            }
        } finally {
            run.job.stop();
        }
        return run.events;
    }

    static Integer integer(Object value) {
        if (value == null) {
            return null;
        }
        if (value instanceof BigInteger b && b.bitLength() > 31) {
            throw new IllegalArgumentException("not an int: " + b);
        }
        return ((Number) value).intValue();
    }

    /**
     * The new job's keyed vertex, an ExecutionJobVertex (never scheduled) whose parallelism and maximum
     * parallelism are what Flink's scheduler settles: the explicit maximum or
     * computeDefaultMaxParallelism's (KG-9, KG-10), and whether it may take a checkpoint's
     * (canRescaleMaxParallelism, KG-16). Throws IllegalArgumentException with Flink's message when
     * KeyGroupRangeAssignment's checks refuse the parallelisms (KG-8).
     */
    static ExecutionJobVertex settle(int parallelism, Integer explicit) throws Exception {
        KeyGroupRangeAssignment.checkParallelismPreconditions(parallelism);
        if (explicit != null) {
            KeyGroupRangeAssignment.checkParallelismPreconditions(explicit);
        }
        JobVertex vertex = new JobVertex("keyed");
        vertex.setParallelism(parallelism);
        if (explicit != null) {
            vertex.setMaxParallelism(explicit);
        }
        VertexParallelismInformation info = SchedulerBase.computeVertexParallelismStore(List.of(vertex))
                .getParallelismInfo(vertex.getID());
        // "Maximum parallelism must not be smaller than parallelism."
        KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(info.getMaxParallelism(), parallelism, 0);
        return new ExecutionJobVertex(NO_GRAPH, vertex, info, null, null);
    }

    /** The execution graph of a vertex that is never scheduled: ExecutionJobVertex's constructor keeps it
     * and asks it nothing (glue; the checks below ask the vertex only). */
    static final InternalExecutionGraphAccessor NO_GRAPH = (InternalExecutionGraphAccessor) Proxy.newProxyInstance(
            KeyGroupsEngine.class.getClassLoader(), new Class<?>[] {InternalExecutionGraphAccessor.class},
            (proxy, method, args) -> {
                throw new UnsupportedOperationException("no execution graph: " + method.getName());
            });

    /** StateAssignmentOperation's private static checkParallelismPreconditions(OperatorState,
     * ExecutionJobVertex), the check assignStates makes per restored operator. */
    static final Method CHECK_PARALLELISM;

    static {
        try {
            CHECK_PARALLELISM = StateAssignmentOperation.class.getDeclaredMethod("checkParallelismPreconditions",
                    OperatorState.class, ExecutionJobVertex.class);
            CHECK_PARALLELISM.setAccessible(true);
        } catch (NoSuchMethodException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** One schedule's run: the job, its latest checkpoint, the events. */
    static final class Run {
        final boolean pyflinkKeys;
        final List<Map<String, Object>> events = new ArrayList<>();
        KeyGroupsJob job;
        KeyGroupsJob.Checkpoint checkpoint;
        long checkpoints;

        Run(boolean pyflinkKeys, KeyGroupsJob job) {
            this.pyflinkKeys = pyflinkKeys;
            this.job = job;
        }

        void step(int index, Map<String, Object> step) throws Exception {
            switch ((String) step.get("op")) {
                case "update" -> update(index, step);
                case "add_state" -> job.add(((Number) step.get("subtask")).intValue() % job.parallelism,
                        (String) step.get("name"), (String) step.getOrDefault("mode", "split"),
                        ((Number) step.get("element")).longValue());
                case "checkpoint" -> checkpoint = job.checkpoint(++checkpoints);
                case "restore" -> restore(index, ((Number) step.get("parallelism")).intValue(),
                        integer(step.get("max_parallelism")));
                default -> throw new IllegalArgumentException("not a key_groups step: " + step);
            }
        }

        static Object key(Object key, String type) {
            if (key == null) {
                return null;
            }
            return switch (type) {
                case "int" -> ((Number) key).intValue();
                case "long" -> ((Number) key).longValue();
                default -> (String) key;
            };
        }

        /** KG-1..KG-3, KG-6, KG-7, KG-11, KG-33: Flink routes the key, the subtask's backend sums it. */
        void update(int index, Map<String, Object> step) throws Exception {
            String type = (String) step.getOrDefault("type", "int");
            Object key = key(step.get("key"), type);
            Object routed = pyflinkKeys ? Row.of(key) : key;  // KG-33: PyFlink's key_by keys by Row.of(key)
            int subtask;
            try {
                subtask = KeyGroupRangeAssignment.assignKeyToParallelOperator(routed, job.maxParallelism,
                        job.parallelism);
            } catch (NullPointerException e) {  // "Assigned key must not be null!" (KG-7)
                events.add(AreaEngine.event(index, "null_key"));
                return;
            }
            int keyGroup = KeyGroupRangeAssignment.assignToKeyGroup(routed, job.maxParallelism);
            ValueState<Long> sum = job.sum(subtask, type, routed);
            long value = (sum.value() == null ? 0 : sum.value()) + ((Number) step.getOrDefault("value", 1)).longValue();
            sum.update(value);
            events.add(AreaEngine.event(index, "routed", "key", key, "type", type,
                    "hash", MathUtils.murmurHash(routed == null ? 0 : routed.hashCode()), "key_group", keyGroup,
                    "subtask", subtask, "value", value));
        }

        /** KG-8, KG-16, KG-15 (C7); then the new job from the checkpoint (KG-13, KG-14, KG-17..KG-21). */
        void restore(int index, int parallelism, Integer explicit) throws Exception {
            ExecutionJobVertex vertex;
            try {
                vertex = settle(parallelism, explicit);
            } catch (IllegalArgumentException e) {
                events.add(AreaEngine.event(index, "restore_refused", "reason", REFUSED_PARALLELISM));
                return;
            }
            KeyGroupsJob.Checkpoint c = checkpoint;
            if (c != null) {
                int stored = c.maxParallelism();
                // Checkpoints.loadAndValidateCheckpoint's condition: "Max parallelism mismatch between
                // checkpoint/savepoint state and new program" unless the vertex may take the stored maximum (KG-16)
                if (vertex.getMaxParallelism() != stored && !vertex.canRescaleMaxParallelism(stored)) {
                    events.add(AreaEngine.event(index, "restore_refused", "reason", REFUSED_MAX_CHANGED));
                    return;
                }
                // StateAssignmentOperation.checkParallelismPreconditions: "The maximum parallelism ... of the
                // restored state is lower than the configured parallelism" (KG-15); else the vertex takes
                // the stored maximum
                try {
                    CHECK_PARALLELISM.invoke(null, c.operator(), vertex);
                } catch (InvocationTargetException e) {
                    if (!(e.getCause() instanceof IllegalStateException)) {
                        throw e;
                    }
                    events.add(AreaEngine.event(index, "restore_refused", "reason", REFUSED_ABOVE_MAX));
                    return;
                }
            }
            job.stop();
            job = new KeyGroupsJob(vertex.getParallelism(), vertex.getMaxParallelism(), pyflinkKeys,
                    c == null ? Map.of() : c.modes());
            if (c != null) {
                job.restore(c);
            }
            restoredEvents(index);
        }

        void restoredEvents(int index) throws Exception {
            events.add(AreaEngine.event(index, "restored", "parallelism", job.parallelism,
                    "max_parallelism", job.maxParallelism));
            for (int i = 0; i < job.parallelism; i++) {
                KeyGroupRange range = job.range(i);
                events.add(AreaEngine.event(index, "range", "subtask", i, "first", range.getStartKeyGroup(),
                        "last", range.getEndKeyGroup()));
            }
            for (int i = 0; i < job.parallelism; i++) {
                List<Object[]> keys = new ArrayList<>();  // key group, type, key, sum
                for (String type : KeyGroupsJob.TYPES) {
                    for (Map.Entry<Object, Long> e : job.sums(i, type).entrySet()) {
                        Object stored = e.getKey();
                        Object key = pyflinkKeys ? ((Row) stored).getField(0) : stored;
                        keys.add(new Object[] {KeyGroupRangeAssignment.assignToKeyGroup(stored, job.maxParallelism),
                                type, key, e.getValue()});
                    }
                }
                keys.sort(KEYED_ORDER);
                for (Object[] k : keys) {
                    events.add(AreaEngine.event(index, "keyed", "subtask", i, "key_group", k[0], "key", k[2],
                            "type", k[1], "value", k[3]));
                }
            }
            for (int i = 0; i < job.parallelism; i++) {
                for (String name : job.modes.keySet()) {  // names in code-point order (a TreeMap of Strings
                    // orders by UTF-16 units; state names of schedules are ASCII identifiers)
                    List<Long> elements = job.elements(i, name);
                    elements.sort(null);  // C3: a restored list's order is not specified
                    events.add(AreaEngine.event(index, "operator", "subtask", i, "name", name, "elements", elements));
                }
            }
        }
    }

    /** The spec's order of keyed events inside a subtask: key group, type, key (null first, by value,
     * strings by code points). */
    static final Comparator<Object[]> KEYED_ORDER = Comparator
            .comparingInt((Object[] k) -> (Integer) k[0])
            .thenComparingInt(k -> TYPE_ORDER.indexOf((String) k[1]))
            .thenComparing(k -> k[2], KeyGroupsEngine::compareKeys);

    static int compareKeys(Object a, Object b) {
        if (a == null || b == null) {
            return a == null ? (b == null ? 0 : -1) : 1;
        }
        if (a instanceof String s && b instanceof String t) {
            return java.util.Arrays.compare(s.codePoints().toArray(), t.codePoints().toArray());
        }
        return Long.compare(((Number) a).longValue(), ((Number) b).longValue());
    }
}
