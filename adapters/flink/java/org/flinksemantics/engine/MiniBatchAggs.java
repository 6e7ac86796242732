package org.flinksemantics.engine;

import java.io.Serializable;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.table.data.GenericMapData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.MapData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.data.writer.BinaryRowWriter;
import org.apache.flink.table.runtime.dataview.StateDataViewStore;
import org.apache.flink.table.runtime.generated.AggsHandleFunction;
import org.apache.flink.table.runtime.generated.GeneratedAggsHandleFunction;
import org.apache.flink.table.runtime.generated.GeneratedProjection;
import org.apache.flink.table.runtime.generated.GeneratedRecordEqualiser;
import org.apache.flink.table.runtime.generated.Projection;
import org.apache.flink.table.runtime.generated.RecordEqualiser;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.MapType;

/**
 * The user-function side of the mini_batch area's query, {@code SELECT k, COUNT(*), SUM(v), MIN(v),
 * MAX(v) FROM input GROUP BY k}: what Flink's planner generates as Java source and compiles with
 * Janino at run time (an {@link AggsHandleFunction}, a {@link RecordEqualiser}, the key's
 * {@link Projection}), written by hand here since the planner's code generator is not a runtime class.
 * It is not Flink's operator logic: the operators (MiniBatchGroupAggFunction, GroupAggFunction, the
 * local and global functions, the bundle operators) are Flink's own and call these.
 *
 * <p>The aggregates follow Flink's built-in retracting functions (MB-30): {@code Count1AggFunction}
 * (COUNT(*), the accumulator field the RecordCounter reads: index 0), {@code
 * LongSumWithRetractAggFunction} (SUM in Java long arithmetic, wrapping around) and {@code
 * Min/MaxWithRetractAggFunction} (every value with its multiplicity, a retraction of an absent value
 * kept as a negative multiplicity). Accumulator row: (count BIGINT, sum BIGINT, values MAP&lt;BIGINT,
 * BIGINT&gt;); value row: (count, sum, min, max), MIN and MAX null when no value is held.
 */
final class MiniBatchAggs {

    /** The accumulator's types (the operators' accTypes: their state's serializer). */
    static final LogicalType[] ACC_TYPES = {new BigIntType(), new BigIntType(),
        new MapType(new BigIntType(), new BigIntType())};

    /** The input row (k, v) and the key row (k). */
    static final LogicalType[] INPUT_TYPES = {new BigIntType(), new BigIntType()};

    static final int COUNT_STAR_INDEX = 0;

    private MiniBatchAggs() {
    }

    /** COUNT(*), SUM, MIN, MAX with retraction on the accumulator's fields read from {@code offset}. */
    static final class Handler implements AggsHandleFunction {
        private final int mergeOffset;
        private long count;
        private long sum;
        private TreeMap<Long, Long> values = new TreeMap<>();

        /** mergeOffset: where a merged row's accumulator starts (1 for the global phase's (key, acc) rows). */
        Handler(int mergeOffset) {
            this.mergeOffset = mergeOffset;
        }

        @Override
        public void open(StateDataViewStore store) {
        }

        @Override
        public void accumulate(RowData input) {
            add(input.getLong(1), 1);
        }

        @Override
        public void retract(RowData input) {
            add(input.getLong(1), -1);
        }

        private void add(long v, long n) {
            count += n;
            sum = n > 0 ? sum + v : sum - v;  // Java long arithmetic: wraps around (MB-30)
            multiply(v, n);
        }

        private void multiply(long v, long n) {
            long m = values.getOrDefault(v, 0L) + n;
            if (m == 0) {
                values.remove(v);
            } else {
                values.put(v, m);
            }
        }

        @Override
        public void merge(RowData other) {
            count += other.getLong(mergeOffset);
            sum += other.getLong(mergeOffset + 1);
            readValues(other.getMap(mergeOffset + 2)).forEach(this::multiply);
        }

        @Override
        public void setAccumulators(RowData acc) {
            count = acc.getLong(0);
            sum = acc.getLong(1);
            values = readValues(acc.getMap(2));
        }

        static TreeMap<Long, Long> readValues(MapData map) {
            TreeMap<Long, Long> out = new TreeMap<>();
            for (int i = 0; i < map.size(); i++) {
                out.put(map.keyArray().getLong(i), map.valueArray().getLong(i));
            }
            return out;
        }

        @Override
        public void resetAccumulators() {
            count = 0;
            sum = 0;
            values = new TreeMap<>();
        }

        @Override
        public RowData getAccumulators() {
            return GenericRowData.of(count, sum, new GenericMapData(new TreeMap<Object, Object>(values)));
        }

        @Override
        public RowData createAccumulators() {
            return GenericRowData.of(0L, 0L, new GenericMapData(new TreeMap<Object, Object>()));
        }

        @Override
        public RowData getValue() {
            Long min = null;
            Long max = null;
            for (Map.Entry<Long, Long> e : values.entrySet()) {
                if (e.getValue() > 0) {
                    min = min == null ? e.getKey() : min;
                    max = e.getKey();
                }
            }
            return GenericRowData.of(count, sum, min, max);
        }

        @Override
        public void setWindowSize(int windowSize) {
        }

        @Override
        public void cleanup() {
        }

        @Override
        public void close() {
        }
    }

    /** The generated handler's stand-in: newInstance gives the hand-written {@link Handler}. */
    static final class Aggs extends GeneratedAggsHandleFunction {
        private static final long serialVersionUID = 1L;
        private final int mergeOffset;

        Aggs(int mergeOffset) {
            super("MiniBatchAggs", "", new Object[0]);
            this.mergeOffset = mergeOffset;
        }

        @Override
        public AggsHandleFunction newInstance(ClassLoader classLoader) {
            return new Handler(mergeOffset);
        }
    }

    /** The value rows' equaliser (count, sum, min, max; nulls equal), as the generated one compares. */
    static final class Equaliser extends GeneratedRecordEqualiser {
        private static final long serialVersionUID = 1L;

        Equaliser() {
            super("MiniBatchEqualiser", "", new Object[0]);
        }

        @Override
        public RecordEqualiser newInstance(ClassLoader classLoader) {
            return (a, b) -> {
                for (int i = 0; i < 4; i++) {
                    if (a.isNullAt(i) != b.isNullAt(i) || (!a.isNullAt(i) && a.getLong(i) != b.getLong(i))) {
                        return false;
                    }
                }
                return true;
            };
        }
    }

    /** The key's projection (k) to a BinaryRowData, as BinaryRowDataKeySelector's generated one does. */
    static final class KeyProjection extends GeneratedProjection {
        private static final long serialVersionUID = 1L;

        KeyProjection() {
            super("MiniBatchKeyProjection", "", new Object[0]);
        }

        @Override
        @SuppressWarnings({"rawtypes", "unchecked"})
        public Projection newInstance(ClassLoader classLoader) {
            return (Projection & Serializable) row -> key(((RowData) row).getLong(0));
        }
    }

    /** A key row (k) in Flink SQL's binary format. */
    static BinaryRowData key(long k) {
        BinaryRowData key = new BinaryRowData(1);
        BinaryRowWriter writer = new BinaryRowWriter(key);
        writer.writeLong(0, k);
        writer.complete();
        return key;
    }
}
