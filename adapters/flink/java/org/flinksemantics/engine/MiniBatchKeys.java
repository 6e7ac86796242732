package org.flinksemantics.engine;

import java.util.Arrays;

/**
 * The keys that two-phase schedules run as (C1 of spec/mini-batch.md): Flink's local aggregation
 * (MapBundleOperator) keeps its bundle in a java.util.HashMap keyed by the key's BinaryRowData and
 * sends a bundle's keys in that map's iteration order, by bucket of the key's hash; C1 specifies
 * first arrival. Keys whose hashes (BinaryRowData.hashCode, spread as HashMap spreads it) share their
 * low 8 bits share one bucket in a HashMap of capacity 16 to 256, and a bucket keeps its keys in
 * insertion order while it is a list (up to 8), so with these keys Flink's order is first arrival.
 * Found at start-up with Flink's own BinaryRowData (as the pyflink adapter's STAND_INS are).
 */
final class MiniBatchKeys {

    static final int COUNT = 8;
    static final long FIRST_CANDIDATE = 1_000_000L;
    static final long[] STAND_INS = find();

    private MiniBatchKeys() {
    }

    /** HashMap's spread of the key row's hash: its low bits are the bucket. */
    static int spread(long key) {
        int h = MiniBatchAggs.key(key).hashCode();
        return h ^ (h >>> 16);
    }

    static long[] find() {
        long[] keys = new long[COUNT];
        int bucket = spread(FIRST_CANDIDATE) & 0xFF;
        int n = 0;
        for (long k = FIRST_CANDIDATE; n < COUNT; k++) {
            if ((spread(k) & 0xFF) == bucket) {
                keys[n++] = k;
            }
        }
        return Arrays.copyOf(keys, n);
    }
}
