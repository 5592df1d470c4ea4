/*
 * The clock faker of the fault tier (helpers/faults.py builds it; LD_PRELOAD it into a server).
 *
 * The wall clock of every process that loads it is the real one plus an offset in seconds read
 * from the file $COSID_FAKECLOCK_FILE ("+2.000", "-0.300"), read again at every call, so that a
 * test moves a running server's clock by rewriting the file. Only the wall clock moves:
 * clock_gettime() of CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday() and time(). The
 * monotonic and boot clocks stay real.
 *
 * Why not libfaketime: PostgreSQL reads the clock inside its SIGALRM handler
 * (GetCurrentTimestamp() in timeout.c), and libfaketime reads its timestamp file with fopen(),
 * which allocates. A handler that interrupts the server inside malloc() then corrupts the heap:
 * "malloc assertion failure in sysmalloc", and the process aborts: a lease worker did in 2 of 31
 * runs of test_clock six at a time. Everything here is async-signal-safe:
 * raw system calls (open, read, close, clock_gettime), no allocation, no lock, no stdio. A file
 * caught empty or half-written while a test rewrites it leaves the offset read last.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* A copy: PostgreSQL writes its process titles over the memory of the environment. */
static char offset_file[4096];
/* The offset read last, in nanoseconds; an aligned 64-bit store is atomic on x86_64, so a
 * handler and the code it interrupted never see half of one. */
static volatile int64_t last_offset_ns;

__attribute__((constructor)) static void fakeclock_init(void)
{
    const char *path = getenv("COSID_FAKECLOCK_FILE");

    if (path != NULL && strlen(path) < sizeof(offset_file))
        strcpy(offset_file, path);
}

/* "[+-]seconds[.fraction]" with optional blanks around it; 0 when the text is not that. */
static int parse_offset(const char *text, ssize_t length, int64_t *offset_ns)
{
    ssize_t i = 0;
    int negative = 0, digits = 0;
    int64_t seconds = 0, fraction_ns = 0, scale = 100000000;

    while (i < length && (text[i] == ' ' || text[i] == '\t'))
        i++;
    if (i < length && (text[i] == '+' || text[i] == '-'))
        negative = text[i++] == '-';
    for (; i < length && text[i] >= '0' && text[i] <= '9'; i++, digits++)
    {
        if (seconds > 100000000000LL)
            return 0;
        seconds = seconds * 10 + (text[i] - '0');
    }
    if (i < length && text[i] == '.')
        for (i++; i < length && text[i] >= '0' && text[i] <= '9'; i++, digits++, scale /= 10)
            fraction_ns += (text[i] - '0') * scale;
    while (i < length && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    if (digits == 0 || i != length)
        return 0;
    *offset_ns = (seconds * 1000000000LL + fraction_ns) * (negative ? -1 : 1);
    return 1;
}

static int64_t offset_ns(void)
{
    char text[64];
    ssize_t length;
    int64_t offset;
    int fd, saved_errno = errno;

    if (offset_file[0] == '\0')
        return 0;
    fd = (int) syscall(SYS_openat, AT_FDCWD, offset_file, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
    {
        length = (ssize_t) syscall(SYS_read, fd, text, sizeof(text));
        syscall(SYS_close, fd);
        if (length > 0 && length < (ssize_t) sizeof(text) && parse_offset(text, length, &offset))
            last_offset_ns = offset;
    }
    /* A reading of the clock that succeeds leaves errno as it was. */
    errno = saved_errno;
    return last_offset_ns;
}

static int real_clock_gettime(clockid_t clock, struct timespec *ts)
{
    return (int) syscall(SYS_clock_gettime, clock, ts);
}

static void add_ns(struct timespec *ts, int64_t ns)
{
    int64_t total = (int64_t) ts->tv_nsec + ns % 1000000000LL;

    ts->tv_sec += ns / 1000000000LL + total / 1000000000LL;
    total %= 1000000000LL;
    if (total < 0)
    {
        total += 1000000000LL;
        ts->tv_sec -= 1;
    }
    ts->tv_nsec = total;
}

int clock_gettime(clockid_t clock, struct timespec *ts)
{
    int result = real_clock_gettime(clock, ts);

    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        add_ns(ts, offset_ns());
    return result;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    struct timespec ts;

    (void) tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t) -1;
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
