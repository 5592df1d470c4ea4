import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;

import me.ahoo.cosid.CosId;
import me.ahoo.cosid.converter.Radix62IdConverter;
import me.ahoo.cosid.snowflake.DefaultSnowflakeFriendlyId;
import me.ahoo.cosid.snowflake.MillisecondSnowflakeId;
import me.ahoo.cosid.snowflake.SafeJavaScriptSnowflakeId;
import me.ahoo.cosid.snowflake.SecondSnowflakeId;
import me.ahoo.cosid.snowflake.SnowflakeFriendlyId;
import me.ahoo.cosid.snowflake.SnowflakeId;
import me.ahoo.cosid.snowflake.SnowflakeIdState;
import me.ahoo.cosid.snowflake.SnowflakeIdStateParser;

/**
 * Test vectors of cosid's four layouts, made by CosId's own classes (tests/vectors/generate.sh
 * builds and runs this; the output is tests/vectors/cosid-layouts.json).
 *
 * <p>Each id comes from CosId itself: most from its generator ({@code AbstractSnowflakeId.generate},
 * on a clock this program sets through CosId's {@code getCurrentTime} hook, so that the ids are
 * the same at every run), the rest from its friendly-form parser, which composes an id from
 * chosen parts. The expected parts, friendly forms and Radix62 forms are what CosId's parser
 * ({@code SnowflakeIdStateParser}, UTC), {@code SnowflakeFriendlyId} and
 * {@code Radix62IdConverter} return for that id. Every vector is also checked to read back to the
 * same id through CosId's parsers, so the file holds nothing CosId disagrees with.
 *
 * <p>Usage: {@code java CosIdVectors <cosid-core version>}; writes the JSON to standard output.
 */
public final class CosIdVectors {
    /** A "now" of the vectors, fixed so that the file is the same at every run. */
    static final long NOW_MS = 1_796_124_597_123L; // 2026-12-01T11:29:57.123Z
    /** A calendar corner: the last millisecond of a leap day. */
    static final long LEAP_DAY_MS = 1_709_251_199_999L; // 2024-02-29T23:59:59.999Z

    /** A CosId generator on a clock this program sets. */
    interface Clocked {
        SnowflakeId generator();

        /** Sets the clock to {@code tick}; from call {@code callsBeforeNextTick + 1} of the clock
         * on, it reads {@code tick + 1}, which is how CosId's generator finds the next tick when
         * the sequence of a tick is used up. */
        void setClock(long tick, long callsBeforeNextTick);
    }

    static final class ClockedMillisecond extends MillisecondSnowflakeId implements Clocked {
        long tick;
        long calls;
        long callsBeforeNextTick;

        ClockedMillisecond(SnowflakeId like, int machineId) {
            super(like.getEpoch(), like.getTimestampBit(), like.getMachineBit(), like.getSequenceBit(),
                machineId, SnowflakeId.defaultSequenceResetThreshold(like.getSequenceBit()));
        }

        @Override
        protected long getCurrentTime() {
            return ++calls > callsBeforeNextTick ? tick + 1 : tick;
        }

        @Override
        public SnowflakeId generator() {
            return this;
        }

        @Override
        public void setClock(long tick, long callsBeforeNextTick) {
            this.tick = tick;
            this.calls = 0;
            this.callsBeforeNextTick = callsBeforeNextTick;
        }
    }

    static final class ClockedSecond extends SecondSnowflakeId implements Clocked {
        long tick;
        long calls;
        long callsBeforeNextTick;

        ClockedSecond(SnowflakeId like, int machineId) {
            super(like.getEpoch(), like.getTimestampBit(), like.getMachineBit(), like.getSequenceBit(),
                machineId, SnowflakeId.defaultSequenceResetThreshold(like.getSequenceBit()));
        }

        @Override
        protected long getCurrentTime() {
            return ++calls > callsBeforeNextTick ? tick + 1 : tick;
        }

        @Override
        public SnowflakeId generator() {
            return this;
        }

        @Override
        public void setClock(long tick, long callsBeforeNextTick) {
            this.tick = tick;
            this.calls = 0;
            this.callsBeforeNextTick = callsBeforeNextTick;
        }
    }

    /** One of cosid's layouts, as CosId defines it. */
    static final class Layout {
        final String name;
        final String cosidClass;
        final SnowflakeId reference;
        final boolean second;

        Layout(String name, String cosidClass, SnowflakeId reference) {
            this.name = name;
            this.cosidClass = cosidClass;
            this.reference = reference;
            this.second = reference instanceof SecondSnowflakeId;
        }

        Clocked clocked(int machineId) {
            return second ? new ClockedSecond(reference, machineId)
                : new ClockedMillisecond(reference, machineId);
        }

        long msPerTick() {
            return second ? 1000 : 1;
        }

        /** The tick (CosId's "current time": Unix milliseconds or seconds) containing a Unix ms. */
        long tickOf(long unixMs) {
            return unixMs / msPerTick();
        }

        long epochTick() {
            return reference.getEpoch();
        }

        long lastTick() {
            return reference.getEpoch() + reference.getMaxTimestamp();
        }

        SnowflakeIdStateParser parser(boolean padStart) {
            return SnowflakeIdStateParser.of(reference, ZoneOffset.UTC, padStart);
        }
    }

    static final class Vector {
        final String note;
        final long id;

        Vector(String note, long id) {
            this.note = note;
            this.id = id;
        }
    }

    /**
     * The id CosId's generator makes with this machine id at this tick with this sequence (1 to
     * the maximum, or 0: the id after the maximum, which CosId moves to the next tick; so for 0
     * the clock starts a tick earlier).
     */
    static long generated(Layout layout, int machineId, long tick, long sequence) {
        Clocked clocked = layout.clocked(machineId);
        SnowflakeId generator = clocked.generator();
        long calls = sequence == 0 ? generator.getMaxSequence() + 1 : sequence;
        clocked.setClock(sequence == 0 ? tick - 1 : tick, calls);
        long id = -1;
        for (long i = 0; i < calls; i++) {
            id = generator.generate();
        }
        return id;
    }

    static void check(boolean condition, String what) {
        if (!condition) {
            throw new IllegalStateException("CosId disagrees with itself: " + what);
        }
    }

    static List<Vector> vectors(Layout layout) {
        SnowflakeId reference = layout.reference;
        int maxMachine = reference.getMaxMachineId();
        long maxSequence = reference.getMaxSequence();
        long threshold = SnowflakeId.defaultSequenceResetThreshold(reference.getSequenceBit());
        long now = layout.tickOf(NOW_MS);
        List<Vector> vectors = new ArrayList<>();
        // The first id of the layout: the epoch, machine 0, sequence 0. CosId's generator never
        // makes it (its first id of a tick has sequence 1), so its parser composes it.
        String epochFriendly = layout.parser(false).parse(0L).getFriendlyId();
        vectors.add(new Vector("the epoch, machine 0, sequence 0 (composed by CosId's parser)",
            layout.parser(false).parse(epochFriendly).getId()));
        vectors.add(new Vector("the epoch's tick, highest machine id, first generated id",
            generated(layout, maxMachine, layout.epochTick(), 1)));
        vectors.add(new Vector("now, machine 0, first generated id",
            generated(layout, 0, now, 1)));
        vectors.add(new Vector("now, machine 1, second generated id",
            generated(layout, Math.min(1, maxMachine), now, 2)));
        vectors.add(new Vector("now, highest machine id, last sequence of the tick",
            generated(layout, maxMachine, now, maxSequence)));
        vectors.add(new Vector("the tick after now, sequence 0 after the last sequence of now",
            generated(layout, maxMachine / 2, now + 1, 0)));
        vectors.add(new Vector("the end of a leap day (2024-02-29T23:59:59.999Z), sequence at CosId's reset threshold",
            generated(layout, 5 & maxMachine, layout.tickOf(LEAP_DAY_MS), threshold)));
        vectors.add(new Vector("the layout's last tick, machine 0, sequence 0",
            generated(layout, 0, layout.lastTick(), 0)));
        vectors.add(new Vector("the layout's last id: last tick, highest machine id, last sequence",
            generated(layout, maxMachine, layout.lastTick(), maxSequence)));
        return vectors;
    }

    static String quote(String text) {
        return '"' + text.replace("\\", "\\\\").replace("\"", "\\\"") + '"';
    }

    static String vectorJson(Layout layout, Vector vector) {
        long id = vector.id;
        SnowflakeIdStateParser parser = layout.parser(false);
        SnowflakeIdStateParser padded = layout.parser(true);
        SnowflakeIdState state = parser.parse(id);
        SnowflakeFriendlyId friendlyId = new DefaultSnowflakeFriendlyId(layout.reference, ZoneOffset.UTC);
        String friendly = friendlyId.friendlyId(id).getFriendlyId();
        String friendlyPadded = padded.parse(id).getFriendlyId();
        LocalDateTime timestamp = state.getTimestamp();
        long timestampMs = timestamp.toInstant(ZoneOffset.UTC).toEpochMilli();
        String radix62 = Radix62IdConverter.PAD_START.asString(id);
        String radix62Unpadded = Radix62IdConverter.INSTANCE.asString(id);
        // Every form reads back to the same id in CosId.
        check(id >= 0, "a negative id " + id);
        check(state.getFriendlyId().equals(friendly), "two friendly forms of " + id);
        check(friendlyId.ofFriendlyId(friendly).getId() == id, "friendly " + friendly);
        check(parser.parse(friendlyPadded).getId() == id, "padded friendly " + friendlyPadded);
        check(Radix62IdConverter.PAD_START.asLong(radix62) == id, "radix62 " + radix62);
        check(Radix62IdConverter.INSTANCE.asLong(radix62Unpadded) == id, "radix62 " + radix62Unpadded);
        check(radix62.length() == Radix62IdConverter.MAX_CHAR_SIZE, "padding of " + radix62);
        return "        {\"note\": " + quote(vector.note)
            + ", \"id\": " + id
            + ", \"timestamp_ms\": " + timestampMs
            + ", \"machine_id\": " + state.getMachineId()
            + ", \"sequence\": " + state.getSequence()
            + ", \"friendly\": " + quote(friendly)
            + ", \"friendly_padded\": " + quote(friendlyPadded)
            + ", \"radix62\": " + quote(radix62)
            + ", \"radix62_unpadded\": " + quote(radix62Unpadded) + "}";
    }

    static String layoutJson(Layout layout) {
        SnowflakeId reference = layout.reference;
        long epochMs = reference.getEpoch() * layout.msPerTick();
        check(epochMs == CosId.COSID_EPOCH, layout.name + " is not on CosId's epoch");
        List<String> vectors = new ArrayList<>();
        for (Vector vector : vectors(layout)) {
            vectors.add(vectorJson(layout, vector));
        }
        return "    " + quote(layout.name) + ": {\n"
            + "      \"cosid\": " + quote(layout.cosidClass) + ",\n"
            + "      \"time_unit\": " + quote(layout.second ? "second" : "millisecond") + ",\n"
            + "      \"epoch_ms\": " + epochMs + ",\n"
            + "      \"timestamp_bits\": " + reference.getTimestampBit() + ",\n"
            + "      \"machine_bits\": " + reference.getMachineBit() + ",\n"
            + "      \"sequence_bits\": " + reference.getSequenceBit() + ",\n"
            + "      \"safe_javascript\": " + reference.isSafeJavascript() + ",\n"
            + "      \"vectors\": [\n" + String.join(",\n", vectors) + "\n      ]\n    }";
    }

    public static void main(String[] args) {
        String version = args.length > 0 ? args[0] : "unknown";
        List<Layout> layouts = List.of(
            new Layout("millisecond",
                "new MillisecondSnowflakeId(CosId.COSID_EPOCH, 41, 10, 12, machineId)",
                new MillisecondSnowflakeId(CosId.COSID_EPOCH, 41, 10, 12, 0)),
            new Layout("second",
                "new SecondSnowflakeId(CosId.COSID_EPOCH_SECOND, 31, 10, 22, machineId)",
                new SecondSnowflakeId(CosId.COSID_EPOCH_SECOND, 31, 10, 22, 0)),
            new Layout("safe_js", "SafeJavaScriptSnowflakeId.ofMillisecond(machineId)",
                SafeJavaScriptSnowflakeId.ofMillisecond(0)),
            new Layout("safe_js_second", "SafeJavaScriptSnowflakeId.ofSecond(machineId)",
                SafeJavaScriptSnowflakeId.ofSecond(0)));
        // The generators of the vectors use the real ones' settings; a real one (on the real
        // clock) must make ids that its parser reads as its own.
        for (Layout layout : layouts) {
            SnowflakeId real = layout.reference;
            long id = real.generate();
            SnowflakeIdState state = layout.parser(false).parse(id);
            check(state.getMachineId() == 0 && state.getSequence() >= 0, layout.name + " real id " + id);
        }
        List<String> parts = new ArrayList<>();
        for (Layout layout : layouts) {
            parts.add(layoutJson(layout));
        }
        System.out.print("{\n"
            + "  \"source\": " + quote("CosId me.ahoo.cosid:cosid-core " + version
                + ", through tests/vectors/CosIdVectors.java") + ",\n"
            + "  \"layouts\": {\n" + String.join(",\n", parts) + "\n  }\n}\n");
    }
}
