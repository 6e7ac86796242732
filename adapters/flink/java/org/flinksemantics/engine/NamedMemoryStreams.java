package org.flinksemantics.engine;

import java.io.ByteArrayOutputStream;
import java.util.List;
import org.apache.flink.runtime.state.CheckpointStateOutputStream;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.CheckpointedStateScope;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.memory.ByteStreamStateHandle;

/**
 * Checkpoint streams in memory, like Flink's MemCheckpointStreamFactory, whose handles
 * ({@link ByteStreamStateHandle}) are named by the schedule's checkpoint, the operator and the
 * subtask instead of a random UUID. Flink orders state handles by their hash code in places
 * (RoundRobinOperatorStateRepartitioner's merge maps, and so the order in which a restored
 * backend reads them): with random names a schedule's trace would change from run to run; with
 * these it is the same every run (the order is still Flink's, by the names' hash codes).
 */
final class NamedMemoryStreams implements CheckpointStreamFactory {

    private final String prefix;
    private int next;

    NamedMemoryStreams(String prefix) {
        this.prefix = prefix;
    }

    @Override
    public CheckpointStateOutputStream createCheckpointStateOutputStream(CheckpointedStateScope scope) {
        String name = prefix + "/" + next++;
        return new CheckpointStateOutputStream() {
            private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();

            @Override
            public StreamStateHandle closeAndGetHandle() {
                return new ByteStreamStateHandle(name, bytes.toByteArray());
            }

            @Override
            public void close() {}

            @Override
            public long getPos() {
                return bytes.size();
            }

            @Override
            public void write(int b) {
                bytes.write(b);
            }

            @Override
            public void write(byte[] b, int off, int len) {
                bytes.write(b, off, len);
            }

            @Override
            public void flush() {}

            @Override
            public void sync() {}
        };
    }

    @Override
    public boolean canFastDuplicate(StreamStateHandle handle, CheckpointedStateScope scope) {
        return false;
    }

    @Override
    public List<StreamStateHandle> duplicate(List<StreamStateHandle> handles, CheckpointedStateScope scope) {
        throw new UnsupportedOperationException("no fast duplication of in-memory checkpoint streams");
    }
}
