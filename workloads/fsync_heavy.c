/* fsync-heavy engine: sysbench fileio (1.0.20) -- its request generator, fsync rule and executor,
 * re-implemented so that the traced process is this small C loop and not a Python interpreter.
 *
 * Phases (fsprof markers): 1 "prepare" creates the files (sysbench's `prepare` command plus the
 * file opening of its `run` init), 2 "run" is the measured part (threads released together,
 * stopped by --time or --events, then each thread's end-of-test fsyncs and async drain),
 * 3 "cleanup" closes and removes the files (sysbench's `cleanup` command).
 *
 * Called by workloads/fsync_heavy.py with checked options; prints its raw figures as JSON on
 * stdout, or one sentence on stderr and exit status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libaio.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "phase.h"

enum phase { PHASE_PREPARE = 1, PHASE_RUN = 2, PHASE_CLEANUP = 3 };
enum test_mode { SEQWR, SEQREWR, SEQRD, RNDRD, RNDWR, RNDRW };
static const char *const MODE_NAMES[] = { "seqwr", "seqrewr", "seqrd", "rndrd", "rndwr", "rndrw" };
enum io_mode { IO_SYNC, IO_LIBAIO, IO_URING };
enum op { OP_READ, OP_WRITE, OP_FSYNC };
/* Latency kinds: one histogram each, per thread. */
enum kind { K_READ, K_WRITE, K_FSYNC, K_EVENT, K_COUNT };
static const char *const KIND_NAMES[] = { "read", "write", "fsync", "event" };

struct config {
	enum test_mode mode;
	unsigned files;
	long long total_size, file_size;
	long long block;
	double rw_ratio;
	unsigned fsync_freq;
	bool fsync_end, fsync_all, fdatasync;
	enum io_mode io;
	unsigned backlog;
	int open_flags;
	unsigned threads;
	uint64_t time_ns, max_events;
	uint64_t seed;
	double percentile;
};
static struct config cfg = {
	.mode = RNDWR, .files = 128, .total_size = 256LL << 20, .block = 16384, .rw_ratio = 1.5,
	.fsync_freq = 100, .fsync_end = true, .io = IO_SYNC, .backlog = 128, .threads = 1,
	.time_ns = 10000000000ULL, .percentile = 95,
};

static int *fds;

/* ---- error reporting: one sentence, then exit ---- */

static void die(const char *fmt, ...)
{
	va_list ap;
	fputs("fsync-heavy: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* ---- latency histogram: log-linear, 64 sub-buckets per power of two (within 1.6 %) ---- */

#define SUB_BITS 6
#define SUB (1u << SUB_BITS)
#define NBUCKETS ((64 - SUB_BITS) * SUB)

struct hist {
	uint64_t count, sum, min, max;
	uint64_t bucket[NBUCKETS];
};

static inline unsigned bucket_of(uint64_t v)
{
	if (v < 2 * SUB)
		return (unsigned)v;
	unsigned msb = 63 - __builtin_clzll(v);
	return (msb - SUB_BITS + 1) * SUB + (unsigned)((v >> (msb - SUB_BITS)) & (SUB - 1));
}

/* Largest value that falls in bucket b. */
static uint64_t bucket_top(unsigned b)
{
	if (b < 2 * SUB)
		return b;
	unsigned msb = b / SUB + SUB_BITS - 1;
	uint64_t low = (uint64_t)(SUB + b % SUB) << (msb - SUB_BITS);
	return low + (1ULL << (msb - SUB_BITS)) - 1;
}

static inline void hist_add(struct hist *h, uint64_t v)
{
	h->count++;
	h->sum += v;
	if (v < h->min || h->count == 1)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->bucket[bucket_of(v)]++;
}

static void hist_merge(struct hist *into, const struct hist *h)
{
	if (!h->count)
		return;
	if (!into->count || h->min < into->min)
		into->min = h->min;
	if (h->max > into->max)
		into->max = h->max;
	into->count += h->count;
	into->sum += h->sum;
	for (unsigned i = 0; i < NBUCKETS; i++)
		into->bucket[i] += h->bucket[i];
}

/* The smallest bucket top below which at least pct % of the samples lie (as sysbench's
 * percentile), clipped to the observed min and max. */
static uint64_t hist_percentile(const struct hist *h, double pct)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)(pct / 100.0 * h->count + 0.999999), seen = 0;
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < NBUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank) {
			uint64_t v = bucket_top(i);
			return v < h->min ? h->min : v > h->max ? h->max : v;
		}
	}
	return h->max;
}

/* ---- random numbers: xoshiro256**, one state per thread ---- */

struct rng { uint64_t s[4]; };

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline double rng_double(struct rng *r)
{
	uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
	return (result >> 11) * 0x1.0p-53;
}

/* ---- the request generator: sysbench's shared state, under one mutex ---- */

struct request {
	enum op op;
	bool periodic;  /* an fsync of a periodic round */
	unsigned file;
	long long pos, size;
};

static struct {
	pthread_mutex_t lock;
	uint64_t req_performed;   /* read and write requests handed out (fsyncs not counted) */
	bool is_dirty;            /* a write was handed out since the last complete fsync round */
	unsigned fsynced_file;    /* next file of the current fsync round */
	unsigned current_file;    /* sequential modes: where the next request goes */
	long long position;
	uint64_t reads_done, writes_done; /* completed, for rndrw's ratio (sysbench's read_ops/write_ops) */
} gen = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* sysbench: once is_dirty and req_performed % freq == 0, each next request fsyncs the next
 * file, until every file had one; only then do reads and writes resume. */
static bool fsync_round_due(void)
{
	return cfg.fsync_freq && gen.is_dirty && gen.req_performed % cfg.fsync_freq == 0;
}

static struct request next_fsync_of_round(void)
{
	struct request rq = { .op = OP_FSYNC, .periodic = true, .file = gen.fsynced_file };
	if (++gen.fsynced_file == cfg.files) {
		gen.fsynced_file = 0;
		gen.is_dirty = false;
	}
	return rq;
}

static struct request next_seq_request(void)
{
	struct request rq = { .op = cfg.mode == SEQRD ? OP_READ : OP_WRITE };
	if (rq.op == OP_WRITE && fsync_round_due())
		return next_fsync_of_round();
	gen.req_performed++;
	if (rq.op == OP_WRITE)
		gen.is_dirty = true;
	if (gen.current_file == cfg.files) { /* all files done: start over */
		gen.current_file = 0;
		gen.position = 0;
	}
	rq.file = gen.current_file;
	rq.pos = gen.position;
	rq.size = cfg.block < cfg.file_size - gen.position ? cfg.block : cfg.file_size - gen.position;
	gen.position += rq.size;
	if (gen.position == cfg.file_size) {
		gen.current_file++;
		gen.position = 0;
	}
	return rq;
}

static bool rndrw_picks_read(void)
{
	uint64_t reads = __atomic_load_n(&gen.reads_done, __ATOMIC_RELAXED);
	uint64_t writes = __atomic_load_n(&gen.writes_done, __ATOMIC_RELAXED);
	return (double)(reads + 1) / (double)(writes + 1) < cfg.rw_ratio;
}

static struct request next_rnd_request(struct rng *rng)
{
	bool write = cfg.mode == RNDWR || (cfg.mode == RNDRW && !rndrw_picks_read());
	if (fsync_round_due())
		return next_fsync_of_round();
	struct request rq = { .op = write ? OP_WRITE : OP_READ };
	/* sysbench spans --file-total-size; we span the files as created (the same when it divides
	 * evenly), so that a remainder cannot point past the last file. */
	long long span = cfg.file_size * cfg.files;
	long long off = (long long)(rng_double(rng) * span);
	off -= off % cfg.block;
	rq.file = (unsigned)(off / cfg.file_size);
	rq.pos = off % cfg.file_size;
	rq.size = cfg.block < cfg.file_size - rq.pos ? cfg.block : cfg.file_size - rq.pos;
	gen.req_performed++;
	if (write)
		gen.is_dirty = true;
	return rq;
}

static struct request next_request(struct rng *rng)
{
	pthread_mutex_lock(&gen.lock);
	struct request rq = cfg.mode <= SEQRD ? next_seq_request() : next_rnd_request(rng);
	pthread_mutex_unlock(&gen.lock);
	return rq;
}

/* ---- worker threads ---- */

struct slot { /* one in-flight async request */
	struct iocb iocb;
	enum op op;
	unsigned file;
	long long size;
	uint64_t start;
};

/* A thread's counts; the result sums them over threads. */
struct counts {
	uint64_t events, busy_ns;
	uint64_t reads, writes, bytes_read, bytes_written;
	uint64_t fsyncs_periodic, fsyncs_end, fsyncs_after_write;
};

static void counts_add(struct counts *into, const struct counts *c)
{
	into->events += c->events;
	into->busy_ns += c->busy_ns;
	into->reads += c->reads;
	into->writes += c->writes;
	into->bytes_read += c->bytes_read;
	into->bytes_written += c->bytes_written;
	into->fsyncs_periodic += c->fsyncs_periodic;
	into->fsyncs_end += c->fsyncs_end;
	into->fsyncs_after_write += c->fsyncs_after_write;
}

struct worker {
	pthread_t tid;
	unsigned id;
	void *buf;
	struct rng rng;
	struct hist hist[K_COUNT];
	struct counts n;
	/* async */
	io_context_t aio;
	struct io_event *aio_events;
	struct io_uring ring;
	struct slot *slots;
	unsigned *free_slots, nfree, inflight;
};

static struct worker *workers;
static pthread_barrier_t ready_barrier, go_barrier;
static uint64_t run_start_ns;
static uint64_t nevents;           /* events handed out, against --events */
static volatile int stop_error;    /* a worker failed: the others stop too */
static char error_text[512];
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *fmt, ...)
{
	pthread_mutex_lock(&error_lock);
	if (!stop_error) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(error_text, sizeof(error_text), fmt, ap);
		va_end(ap);
		stop_error = 1;
	}
	pthread_mutex_unlock(&error_lock);
}

/* sysbench's sb_more_events: the time limit first, then the event budget. `now` is the end of
 * this thread's previous event, which saves a clock read per event. */
static inline bool more_events(uint64_t now)
{
	if (stop_error)
		return false;
	if (cfg.time_ns && now - run_start_ns >= cfg.time_ns)
		return false;
	if (cfg.max_events && __atomic_fetch_add(&nevents, 1, __ATOMIC_RELAXED) >= cfg.max_events)
		return false;
	return true;
}

static int sync_call(int fd)
{
	return cfg.fdatasync ? fdatasync(fd) : fsync(fd);
}

static const char *sync_name(void) { return cfg.fdatasync ? "fdatasync" : "fsync"; }

/* Each timed operation takes its start time from the caller and returns its end time (0 on
 * failure), so that an event costs two clock reads, as few as sysbench's. */
static uint64_t do_fsync(struct worker *w, unsigned file, uint64_t t0)
{
	if (sync_call(fds[file])) {
		fail("%s of test_file.%u failed: %s", sync_name(), file, strerror(errno));
		return 0;
	}
	uint64_t t1 = now_ns();
	hist_add(&w->hist[K_FSYNC], t1 - t0);
	return t1;
}

static void count_done(struct worker *w, enum op op, long long size, uint64_t latency)
{
	if (op == OP_READ) {
		w->n.reads++;
		w->n.bytes_read += size;
		__atomic_fetch_add(&gen.reads_done, 1, __ATOMIC_RELAXED);
	} else {
		w->n.writes++;
		w->n.bytes_written += size;
		__atomic_fetch_add(&gen.writes_done, 1, __ATOMIC_RELAXED);
	}
	hist_add(&w->hist[op == OP_READ ? K_READ : K_WRITE], latency);
}

static uint64_t sync_rw(struct worker *w, const struct request *rq, uint64_t t0)
{
	int fd = fds[rq->file];
	ssize_t done = rq->op == OP_READ ? pread(fd, w->buf, rq->size, rq->pos)
	                                 : pwrite(fd, w->buf, rq->size, rq->pos);
	uint64_t t1 = now_ns();
	if (done != rq->size) {
		fail("%s of %lld bytes at %lld in test_file.%u failed: %s",
		     rq->op == OP_READ ? "pread" : "pwrite", rq->size, rq->pos, rq->file,
		     done < 0 ? strerror(errno) : "short transfer");
		return 0;
	}
	count_done(w, rq->op, rq->size, t1 - t0);
	return t1;
}

/* -- async: libaio (as sysbench) or io_uring; submit one request per event, wait for at least one
 * completion once `backlog` are in flight -- */

static void reap(struct worker *w, unsigned slot_index, long long res)
{
	struct slot *s = &w->slots[slot_index];
	if (res != s->size) {
		fail("asynchronous %s of %lld bytes in test_file.%u failed: %s",
		     s->op == OP_READ ? "read" : "write", s->size, s->file,
		     res < 0 ? strerror((int)-res) : "short transfer");
		return;
	}
	count_done(w, s->op, s->size, now_ns() - s->start);
	w->free_slots[w->nfree++] = slot_index;
	w->inflight--;
}

static bool wait_completions(struct worker *w, unsigned at_least)
{
	if (cfg.io == IO_LIBAIO) {
		int n = io_getevents(w->aio, at_least, cfg.backlog, w->aio_events, NULL);
		if (n < 0) {
			fail("io_getevents failed: %s", strerror(-n));
			return false;
		}
		for (int i = 0; i < n; i++)
			reap(w, (unsigned)(uintptr_t)w->aio_events[i].data, (long long)w->aio_events[i].res);
		return !stop_error;
	}
	struct io_uring_cqe *cqe;
	int rc = io_uring_wait_cqe_nr(&w->ring, &cqe, at_least);
	if (rc < 0) {
		fail("io_uring wait failed: %s", strerror(-rc));
		return false;
	}
	unsigned head, seen = 0;
	io_uring_for_each_cqe(&w->ring, head, cqe) {
		reap(w, (unsigned)cqe->user_data, cqe->res);
		seen++;
	}
	io_uring_cq_advance(&w->ring, seen);
	return !stop_error;
}

static uint64_t async_rw(struct worker *w, const struct request *rq, uint64_t t0)
{
	unsigned idx = w->free_slots[--w->nfree];
	struct slot *s = &w->slots[idx];
	int fd = fds[rq->file];
	s->op = rq->op;
	s->file = rq->file;
	s->size = rq->size;
	s->start = t0;
	if (cfg.io == IO_LIBAIO) {
		if (rq->op == OP_READ)
			io_prep_pread(&s->iocb, fd, w->buf, rq->size, rq->pos);
		else
			io_prep_pwrite(&s->iocb, fd, w->buf, rq->size, rq->pos);
		s->iocb.data = (void *)(uintptr_t)idx;
		struct iocb *list[1] = { &s->iocb };
		int rc = io_submit(w->aio, 1, list);
		if (rc != 1) {
			fail("io_submit failed: %s", rc < 0 ? strerror(-rc) : "nothing submitted");
			return 0;
		}
	} else {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
		if (rq->op == OP_READ)
			io_uring_prep_read(sqe, fd, w->buf, rq->size, rq->pos);
		else
			io_uring_prep_write(sqe, fd, w->buf, rq->size, rq->pos);
		io_uring_sqe_set_data64(sqe, idx);
		int rc = io_uring_submit(&w->ring);
		if (rc != 1) {
			fail("io_uring submit failed: %s", rc < 0 ? strerror(-rc) : "nothing submitted");
			return 0;
		}
	}
	if (++w->inflight >= cfg.backlog && !wait_completions(w, 1))
		return 0;
	return now_ns();
}

/* One event; sysbench's file_execute_event. fsyncs are synchronous calls in every I/O mode, as
 * in sysbench (its asynchronous fsync path is unreachable), so they do not wait for in-flight
 * async writes. */
static uint64_t execute(struct worker *w, const struct request *rq, uint64_t t0)
{
	if (rq->op == OP_FSYNC) {
		uint64_t end = do_fsync(w, rq->file, t0);
		w->n.fsyncs_periodic += end != 0;
		return end;
	}
	uint64_t end = cfg.io == IO_SYNC ? sync_rw(w, rq, t0) : async_rw(w, rq, t0);
	if (end && rq->op == OP_WRITE && cfg.fsync_all) {
		end = do_fsync(w, rq->file, end);
		w->n.fsyncs_after_write += end != 0;
	}
	return end;
}

/* sysbench's file_thread_done: every thread fsyncs every file (write modes, --file-fsync-end),
 * then waits for its in-flight async requests. */
static void thread_done(struct worker *w)
{
	if (cfg.fsync_end && cfg.mode != SEQRD && cfg.mode != RNDRD)
		for (unsigned i = 0; i < cfg.files && !stop_error; i++)
			if (do_fsync(w, i, now_ns()))
				w->n.fsyncs_end++;
	while (w->inflight && !stop_error)
		wait_completions(w, w->inflight);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	pthread_barrier_wait(&ready_barrier);
	pthread_barrier_wait(&go_barrier);
	uint64_t last = run_start_ns;
	while (more_events(last)) {
		struct request rq = next_request(&w->rng);
		uint64_t t0 = now_ns();
		uint64_t end = execute(w, &rq, t0);
		if (!end)
			break;
		last = end;
		hist_add(&w->hist[K_EVENT], last - t0);
		w->n.events++;
		w->n.busy_ns += last - t0;
	}
	if (!stop_error)
		thread_done(w);
	return NULL;
}

static void worker_init(struct worker *w, unsigned id)
{
	w->id = id;
	rng_seed(&w->rng, cfg.seed + id);
	if (posix_memalign(&w->buf, 4096, cfg.block))
		die("cannot allocate a %lld-byte buffer", cfg.block);
	memset(w->buf, 0, cfg.block); /* sysbench writes zeroes */
	if (cfg.io == IO_SYNC)
		return;
	w->slots = calloc(cfg.backlog, sizeof(*w->slots));
	w->free_slots = calloc(cfg.backlog, sizeof(*w->free_slots));
	if (!w->slots || !w->free_slots)
		die("cannot allocate %u async request slots", cfg.backlog);
	for (unsigned i = 0; i < cfg.backlog; i++)
		w->free_slots[i] = cfg.backlog - 1 - i;
	w->nfree = cfg.backlog;
	if (cfg.io == IO_LIBAIO) {
		int rc = io_queue_init((int)cfg.backlog, &w->aio);
		w->aio_events = calloc(cfg.backlog, sizeof(*w->aio_events));
		if (rc < 0 || !w->aio_events)
			die("io_setup for %u requests failed: %s (see /proc/sys/fs/aio-max-nr)",
			    cfg.backlog, strerror(-rc));
	} else {
		int rc = io_uring_queue_init(cfg.backlog, &w->ring, 0);
		if (rc < 0)
			die("io_uring_setup for %u entries failed: %s", cfg.backlog, strerror(-rc));
	}
}

/* ---- prepare and cleanup ---- */

static void file_name(char *out, size_t len, unsigned i) { snprintf(out, len, "test_file.%u", i); }

struct prepare_stats { uint64_t writes, bytes, fsyncs, files_created, files_reused; };

/* sysbench's create_files: append whole blocks with write() up to the file size (so the last
 * block may reach past it), fsync, close; an existing file is extended or reused. */
static void create_file(unsigned i, void *buf, struct prepare_stats *st)
{
	char name[64];
	file_name(name, sizeof(name), i);
	int fd = open(name, O_CREAT | O_WRONLY | cfg.open_flags, 0600);
	if (fd < 0)
		die("cannot create %s: %s", name, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb))
		die("cannot stat %s: %s", name, strerror(errno));
	long long offset = sb.st_size;
	if (offset >= cfg.file_size)
		st->files_reused++;
	else
		st->files_created++;
	for (; offset < cfg.file_size; offset += cfg.block) {
		ssize_t n = write(fd, buf, cfg.block);
		if (n != cfg.block)
			die("writing %s failed: %s", name, n < 0 ? strerror(errno) : "short write");
		st->writes++;
		st->bytes += cfg.block;
	}
	if (fsync(fd))
		die("fsync of %s failed: %s", name, strerror(errno));
	st->fsyncs++;
	close(fd);
}

/* sysbench's `run` init (file_prepare): seqwr starts from empty files, made here; other modes
 * open the prepared files and check their size. */
static void open_files(struct prepare_stats *st)
{
	char name[64];
	for (unsigned i = 0; i < cfg.files; i++) {
		file_name(name, sizeof(name), i);
		if (cfg.mode == SEQWR) {
			if (unlink(name) && errno != ENOENT)
				die("cannot remove %s: %s", name, strerror(errno));
			int fd = open(name, O_CREAT | O_EXCL | O_WRONLY, 0600);
			if (fd < 0)
				die("cannot create %s: %s", name, strerror(errno));
			close(fd);
			st->files_created++;
		}
		fds[i] = open(name, O_RDWR | cfg.open_flags);
		if (fds[i] < 0)
			die("cannot open %s: %s", name, strerror(errno));
	}
}

static void prepare(struct prepare_stats *st)
{
	if (cfg.mode != SEQWR) {
		void *buf;
		if (posix_memalign(&buf, 4096, cfg.block))
			die("cannot allocate a %lld-byte buffer", cfg.block);
		memset(buf, 0, cfg.block);
		for (unsigned i = 0; i < cfg.files; i++)
			create_file(i, buf, st);
		free(buf);
	}
	open_files(st);
}

static uint64_t cleanup(void)
{
	char name[64];
	uint64_t removed = 0;
	for (unsigned i = 0; i < cfg.files; i++) {
		close(fds[i]);
		file_name(name, sizeof(name), i);
		if (unlink(name) == 0)
			removed++;
	}
	return removed;
}

/* ---- the measured phase ---- */

static void cpu_times(uint64_t *user, uint64_t *sys)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	*user = ru.ru_utime.tv_sec * 1000000000ULL + ru.ru_utime.tv_usec * 1000ULL;
	*sys = ru.ru_stime.tv_sec * 1000000000ULL + ru.ru_stime.tv_usec * 1000ULL;
}

/* CPU time of the whole process (every thread) during the run phase: the workload's own cost,
 * which the bench compares with sysbench's. */
static uint64_t run_cpu_user, run_cpu_sys;

static uint64_t run(void)
{
	uint64_t user0, sys0, user1, sys1;
	workers = calloc(cfg.threads, sizeof(*workers));
	if (!workers)
		die("cannot allocate %u workers", cfg.threads);
	pthread_barrier_init(&ready_barrier, NULL, cfg.threads + 1);
	pthread_barrier_init(&go_barrier, NULL, cfg.threads + 1);
	for (unsigned i = 0; i < cfg.threads; i++) {
		worker_init(&workers[i], i);
		int rc = pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]);
		if (rc)
			die("cannot start thread %u: %s", i, strerror(rc));
	}
	pthread_barrier_wait(&ready_barrier);
	fsprof_phase(PHASE_RUN);
	cpu_times(&user0, &sys0);
	run_start_ns = now_ns();
	pthread_barrier_wait(&go_barrier);
	for (unsigned i = 0; i < cfg.threads; i++)
		pthread_join(workers[i].tid, NULL);
	uint64_t elapsed = now_ns() - run_start_ns;
	cpu_times(&user1, &sys1);
	run_cpu_user = user1 - user0;
	run_cpu_sys = sys1 - sys0;
	for (unsigned i = 0; i < cfg.threads; i++) {
		if (cfg.io == IO_LIBAIO)
			io_queue_release(workers[i].aio);
		else if (cfg.io == IO_URING)
			io_uring_queue_exit(&workers[i].ring);
	}
	return elapsed;
}

/* ---- JSON output ---- */

static void print_hist(const char *name, const struct hist *h, bool last)
{
	printf("   \"%s\": {\"count\": %" PRIu64 ", \"sum_ns\": %" PRIu64 ", \"min_ns\": %" PRIu64
	       ", \"avg_ns\": %.1f, \"max_ns\": %" PRIu64 ", \"pct_ns\": %" PRIu64 ", \"p50_ns\": %" PRIu64
	       ", \"p99_ns\": %" PRIu64 "}%s\n",
	       name, h->count, h->sum, h->min, h->count ? (double)h->sum / h->count : 0.0, h->max,
	       hist_percentile(h, cfg.percentile), hist_percentile(h, 50), hist_percentile(h, 99),
	       last ? "" : ",");
}

static void print_result(const struct prepare_stats *ps, uint64_t prepare_ns, uint64_t run_ns,
                         uint64_t cleanup_ns, uint64_t removed)
{
	static struct hist total[K_COUNT];
	struct counts sum = { 0 };
	for (unsigned i = 0; i < cfg.threads; i++) {
		for (int k = 0; k < K_COUNT; k++)
			hist_merge(&total[k], &workers[i].hist[k]);
		counts_add(&sum, &workers[i].n);
	}
	printf("{\n \"prepare\": {\"elapsed_ns\": %" PRIu64 ", \"files_created\": %" PRIu64
	       ", \"files_reused\": %" PRIu64 ", \"writes\": %" PRIu64 ", \"bytes_written\": %" PRIu64
	       ", \"fsyncs\": %" PRIu64 "},\n",
	       prepare_ns, ps->files_created, ps->files_reused, ps->writes, ps->bytes, ps->fsyncs);
	printf(" \"run\": {\n  \"elapsed_ns\": %" PRIu64 ", \"events\": %" PRIu64 ", \"reads\": %" PRIu64
	       ", \"writes\": %" PRIu64 ",\n  \"fsyncs\": %" PRIu64 ", \"fsyncs_periodic\": %" PRIu64
	       ", \"fsyncs_end\": %" PRIu64 ", \"fsyncs_after_write\": %" PRIu64
	       ",\n  \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64 ", \"cpu_user_ns\": %" PRIu64
	       ", \"cpu_sys_ns\": %" PRIu64 ",\n  \"latency\": {\n",
	       run_ns, sum.events, sum.reads, sum.writes,
	       sum.fsyncs_periodic + sum.fsyncs_end + sum.fsyncs_after_write, sum.fsyncs_periodic,
	       sum.fsyncs_end, sum.fsyncs_after_write, sum.bytes_read, sum.bytes_written,
	       run_cpu_user, run_cpu_sys);
	for (int k = 0; k < K_COUNT; k++)
		print_hist(KIND_NAMES[k], &total[k], k == K_COUNT - 1);
	printf("  },\n  \"threads\": [");
	for (unsigned i = 0; i < cfg.threads; i++)
		printf("%s{\"events\": %" PRIu64 ", \"busy_ns\": %" PRIu64 "}", i ? ", " : "",
		       workers[i].n.events, workers[i].n.busy_ns);
	printf("]\n },\n \"cleanup\": {\"elapsed_ns\": %" PRIu64 ", \"files_removed\": %" PRIu64 "}\n}\n",
	       cleanup_ns, removed);
}

/* ---- options (already checked by fsync_heavy.py; re-checked here only where memory is at stake) ---- */

static long long parse_num(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < 0)
		die("--%s wants a non-negative integer, not '%s'", opt, s);
	return v;
}

static int parse_mode(const char *s)
{
	for (int i = 0; i < (int)(sizeof(MODE_NAMES) / sizeof(*MODE_NAMES)); i++)
		if (!strcmp(s, MODE_NAMES[i]))
			return i;
	die("unknown test mode '%s'", s);
	return 0;
}

static int parse_flags(const char *s)
{
	int flags = 0;
	char *copy = strdup(s), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "sync"))
			flags |= O_SYNC;
		else if (!strcmp(tok, "dsync"))
			flags |= O_DSYNC;
		else if (!strcmp(tok, "direct"))
			flags |= O_DIRECT;
		else
			die("unknown extra open flag '%s'", tok);
	}
	free(copy);
	return flags;
}

static void parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", 1, 0, 'm' }, { "files", 1, 0, 'n' }, { "total-size", 1, 0, 's' },
		{ "block", 1, 0, 'b' }, { "rw-ratio", 1, 0, 'r' }, { "fsync-freq", 1, 0, 'f' },
		{ "fsync-end", 1, 0, 'e' }, { "fsync-all", 1, 0, 'a' }, { "fsync-mode", 1, 0, 'y' },
		{ "io", 1, 0, 'i' }, { "backlog", 1, 0, 'q' }, { "flags", 1, 0, 'x' },
		{ "threads", 1, 0, 't' }, { "time-ns", 1, 0, 'T' }, { "events", 1, 0, 'E' },
		{ "seed", 1, 0, 'S' }, { "percentile", 1, 0, 'p' }, { 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': cfg.mode = parse_mode(optarg); break;
		case 'n': cfg.files = (unsigned)parse_num("files", optarg); break;
		case 's': cfg.total_size = parse_num("total-size", optarg); break;
		case 'b': cfg.block = parse_num("block", optarg); break;
		case 'r': cfg.rw_ratio = strtod(optarg, NULL); break;
		case 'f': cfg.fsync_freq = (unsigned)parse_num("fsync-freq", optarg); break;
		case 'e': cfg.fsync_end = parse_num("fsync-end", optarg) != 0; break;
		case 'a': cfg.fsync_all = parse_num("fsync-all", optarg) != 0; break;
		case 'y': cfg.fdatasync = !strcmp(optarg, "fdatasync"); break;
		case 'i': cfg.io = !strcmp(optarg, "libaio") ? IO_LIBAIO : !strcmp(optarg, "io_uring") ? IO_URING : IO_SYNC; break;
		case 'q': cfg.backlog = (unsigned)parse_num("backlog", optarg); break;
		case 'x': cfg.open_flags = parse_flags(optarg); break;
		case 't': cfg.threads = (unsigned)parse_num("threads", optarg); break;
		case 'T': cfg.time_ns = (uint64_t)parse_num("time-ns", optarg); break;
		case 'E': cfg.max_events = (uint64_t)parse_num("events", optarg); break;
		case 'S': cfg.seed = (uint64_t)parse_num("seed", optarg); break;
		case 'p': cfg.percentile = strtod(optarg, NULL); break;
		default: die("unknown engine option");
		}
	}
	if (!cfg.files || cfg.block <= 0 || !cfg.threads || !cfg.backlog)
		die("files, block size, threads and backlog must be positive");
	cfg.file_size = cfg.total_size / cfg.files;
	if (cfg.file_size < cfg.block)
		die("each file (%lld bytes) must hold at least one block (%lld bytes)", cfg.file_size, cfg.block);
	if (cfg.fsync_all) { /* sysbench: --file-fsync-all overrides --file-fsync-freq and -end */
		cfg.fsync_freq = 0;
		cfg.fsync_end = false;
	}
	if (!cfg.seed) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		cfg.seed = (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
	}
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	fds = calloc(cfg.files, sizeof(*fds));
	if (!fds)
		die("cannot allocate %u file descriptors", cfg.files);

	struct prepare_stats ps = { 0 };
	fsprof_phase(PHASE_PREPARE);
	uint64_t t0 = now_ns();
	prepare(&ps);
	uint64_t prepare_ns = now_ns() - t0;

	uint64_t run_ns = run();

	fsprof_phase(PHASE_CLEANUP);
	t0 = now_ns();
	uint64_t removed = cleanup();
	uint64_t cleanup_ns = now_ns() - t0;
	if (stop_error) {
		fprintf(stderr, "fsync-heavy: %s\n", error_text);
		return 1;
	}
	print_result(&ps, prepare_ns, run_ns, cleanup_ns, removed);
	return 0;
}
