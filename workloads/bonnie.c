/* The bonnie workload's engine: bonnie++'s tests, run in the current directory, with fsprof phase
 * markers around each one. workloads/bonnie.py checks the options, runs this program and formats
 * what it prints (one JSON object on stdout) as bonnie++'s table and CSV line.
 *
 * What each test does, as bonnie++ 2.00a does it (bon_io.cpp, bon_file.cpp), except where noted:
 *   putc     the file written a byte at a time through stdio (putc_unlocked; 2.00a uses 1-byte write(2))
 *   write    the file rewritten from scratch, one write(2) per chunk
 *   rewrite  each chunk read, one byte changed, lseek back, written
 *   getc     the file read a byte at a time through stdio (getc_unlocked; 2.00a uses 1-byte read(2))
 *   read     the file read, one read(2) per chunk
 *   seeks    forked seeker processes take random chunk numbers ("tickets") from a pipe: lseek + read
 *            the chunk, and for 1 ticket in 10 change it, lseek back and write it (fsync with -b)
 *   create   files created (O_CREAT|O_EXCL), filled with max:min random bytes, closed; then synced
 *   stat     each file stat()ed, and read when not empty: readdir order, or random order
 *   delete   each file unlinked: readdir order, or random order; then the directories, synced
 * Every file of the IO tests is fsynced before it is closed, inside the measured time, as bonnie++.
 * Opening, unlinking the previous file, making directories, and dropping caches happen in the
 * "setup" phase; bonnie++ does them before it starts its clock too.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "phase.h"

enum test {
	PUTC, WRITE, REWRITE, GETC, READ, SEEKS,
	SEQ_CREATE, SEQ_STAT, SEQ_DELETE, RAND_CREATE, RAND_STAT, RAND_DELETE, NTESTS
};
static const char *const TEST_NAME[NTESTS] = {
	"putc", "write", "rewrite", "getc", "read", "seeks",
	"seq-create", "seq-stat", "seq-delete", "rand-create", "rand-stat", "rand-delete",
};
#define UPDATE_EVERY 10          /* 1 seek ticket in 10 rewrites its block, as bonnie++'s UpdateSeek */
#define END_TICKET INT32_MIN     /* tells a seeker to stop */
#define RAND_EXTRA_LEN 12        /* file names carry up to 12 random characters */
#define MAX_SEEKERS 1000
#define SUBDIR_LEN 16            /* "%05d" of a directory number below 100000 */

struct config {
	long long size;       /* bytes of the IO test file; 0 skips the IO tests */
	long long char_bytes; /* bytes for the per-char tests; 0 skips them */
	int chunk;            /* bytes per read/write in the IO tests */
	int seeks, seekers;
	long long files;      /* files in the create tests; 0 skips them */
	long max_size, min_size;
	int dirs, file_chunk;
	int sync;             /* -b: fsync after every write in the file tests and seek updates */
	int drop_caches;
	uint64_t seed;
};

struct result {
	int ran;
	double elapsed, cpu, latency; /* seconds; latency is the slowest single operation */
	long long ops;
};

struct measure {
	double wall0, cpu0, op0, latency;
};

static struct config cfg = {
	.chunk = 8192, .seeks = 8192, .seekers = 5, .dirs = 1, .file_chunk = 8192, .drop_caches = 1,
};
static struct result results[NTESTS];
static int phase_index[NTESTS], setup_phase, phase_count;
static const char *phase_names[NTESTS + 1];
static int workdir_fd = -1;              /* where we started: syncfs target and cleanup anchor */
static char io_name[32], test_dir[32];
static int test_dir_made;
static pid_t seeker_pids[MAX_SEEKERS];
static int seekers_running;
static long long seek_updates;
static size_t stdio_buffer;
static volatile sig_atomic_t interrupted;

/* ---------------------------------------------------------------------------------------------- */
/* Failure: one sentence on stderr, what we made removed, exit 1. */

static void remove_tree_at(int dirfd, const char *name);
static void cleanup(void);

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	cleanup();
	exit(1);
}

static void fail_errno(const char *what, const char *name)
{
	int err = errno;
	const char *hint = (err == ENOSPC || err == EDQUOT) ?
		" (the filesystem is full or out of inodes: use a smaller -s or -n)" : "";
	fail("%s %s failed: %s%s", what, name, strerror(err), hint);
}

static void check_interrupted(void)
{
	if (interrupted)
		fail("interrupted");
}

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void stop_seekers(void)
{
	for (int i = 0; i < seekers_running; i++)
		kill(seeker_pids[i], SIGKILL);
	for (int i = 0; i < seekers_running; i++)
		waitpid(seeker_pids[i], NULL, 0);
	seekers_running = 0;
}

static void cleanup(void)
{
	stop_seekers();
	if (workdir_fd < 0)
		return;
	if (fchdir(workdir_fd) == 0 && io_name[0])
		unlinkat(workdir_fd, io_name, 0);
	if (test_dir_made)
		remove_tree_at(workdir_fd, test_dir);
}

/* Removes name (a file, or a directory of files and directories of files) below dirfd. */
static void remove_tree_at(int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			remove_tree_at(fd, e->d_name);
	closedir(d);
	unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* ---------------------------------------------------------------------------------------------- */
/* Clocks, phases and caches */

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU time of this process, as bonnie++ takes it for %CP. */
static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Writes back this filesystem's dirty data and drops the page cache, dentries and inodes, so that a
 * test reads from the device rather than from memory. Runs in the setup phase. */
static void drop_caches(void)
{
	if (!cfg.drop_caches)
		return;
	if (syncfs(workdir_fd))
		fail_errno("syncfs of", "the test directory");
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "3", 1) != 1)
		fail("cannot drop the page cache (%s): run as root, or pass --no-drop-caches", strerror(errno));
	close(fd);
}

static void add_phase(int *index, const char *name)
{
	phase_names[phase_count] = name;
	*index = ++phase_count;
}

/* The phases this run has, in order: the setup phase, then each test that runs. */
static void plan_phases(void)
{
	add_phase(&setup_phase, "setup");
	for (int t = 0; t < NTESTS; t++) {
		int io = t <= SEEKS, per_char = t == PUTC || t == GETC;
		int runs = io ? cfg.size > 0 && (!per_char || cfg.char_bytes > 0) : cfg.files > 0;
		if (runs)
			add_phase(&phase_index[t], TEST_NAME[t]);
	}
}

static void begin(enum test t, struct measure *m)
{
	drop_caches();
	fsprof_phase(phase_index[t]);
	m->latency = 0;
	m->cpu0 = cpu_now();
	m->wall0 = wall_now();
}

static void record(enum test t, double elapsed, double cpu, double latency, long long ops)
{
	results[t] = (struct result){1, elapsed, cpu, latency, ops};
	fsprof_phase(setup_phase);
	check_interrupted();
}

static void finish(enum test t, struct measure *m, long long ops)
{
	double wall = wall_now(), cpu = cpu_now();
	record(t, wall - m->wall0, cpu - m->cpu0, m->latency, ops);
}

static inline void op_start(struct measure *m)
{
	m->op0 = wall_now();
}

static inline void op_end(struct measure *m)
{
	double d = wall_now() - m->op0;
	if (d > m->latency)
		m->latency = d;
}

/* splitmix64: bonnie++ seeds its own generator too (-z); any decent generator keeps the meaning. */
static uint64_t rng_state;

static uint32_t rand31(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (uint32_t)((z ^ (z >> 31)) >> 33);
}

/* ---------------------------------------------------------------------------------------------- */
/* The IO tests: one file, written and read whole */

static int open_io(int create)
{
	if (create && unlink(io_name) && errno != ENOENT)
		fail_errno("unlink of", io_name);
	int fd = open(io_name, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
	if (fd < 0)
		fail_errno("open of", io_name);
	return fd;
}

/* bonnie++ fsyncs every file before closing it, inside the measured time. */
static void close_io(int fd)
{
	if (fsync(fd))
		fail_errno("fsync of", io_name);
	if (close(fd))
		fail_errno("close of", io_name);
}

static FILE *open_stream(int fd, const char *mode)
{
	FILE *fp = fdopen(fd, mode);
	if (!fp)
		fail_errno("fdopen of", io_name);
	/* Allocate stdio's buffer now (glibc sizes it from st_blksize), so its fstat is setup. */
	if (setvbuf(fp, NULL, _IOFBF, 0))
		fail("cannot set up a stdio buffer for %s", io_name);
	stdio_buffer = __fbufsize(fp);
	return fp;
}

static void close_stream(FILE *fp)
{
	if (fflush(fp))
		fail_errno("write (stdio) to", io_name);
	if (fsync(fileno(fp)))
		fail_errno("fsync of", io_name);
	if (fclose(fp))
		fail_errno("close of", io_name);
}

static void read_block(int fd, char *buf, int size)
{
	for (int done = 0; done < size;) {
		ssize_t n = read(fd, buf + done, size - done);
		if (n < 0)
			fail_errno("read of", io_name);
		if (n == 0)
			fail("%s ended early: read %d of a %d-byte chunk", io_name, done, size);
		done += n;
	}
}

static void write_block(int fd, const char *buf, int size)
{
	ssize_t n = write(fd, buf, size);
	if (n < 0)
		fail_errno("write to", io_name);
	if (n != size) {
		errno = ENOSPC;
		fail_errno("write to", io_name);
	}
}

static void test_putc(void)
{
	int fd = open_io(1);
	FILE *fp = open_stream(fd, "w");
	long long chunks = cfg.char_bytes / cfg.chunk;
	struct measure m;
	begin(PUTC, &m);
	for (long long c = 0; c < chunks; c++) {
		op_start(&m);
		for (int i = 0; i < cfg.chunk; i++)
			if (putc_unlocked(i & 0x7f, fp) == EOF)
				fail_errno("write (stdio) to", io_name);
		op_end(&m);
		check_interrupted();
	}
	close_stream(fp);
	finish(PUTC, &m, chunks);
}

static void test_write(char *buf)
{
	int fd = open_io(1);
	long long chunks = cfg.size / cfg.chunk;
	struct measure m;
	memset(buf, 0, cfg.chunk);
	begin(WRITE, &m);
	for (long long c = 0; c < chunks; c++) {
		buf[c % cfg.chunk]++;
		op_start(&m);
		write_block(fd, buf, cfg.chunk);
		op_end(&m);
		check_interrupted();
	}
	close_io(fd);
	finish(WRITE, &m, chunks);
}

static void test_rewrite(char *buf)
{
	int fd = open_io(0);
	long long chunks = cfg.size / cfg.chunk;
	struct measure m;
	begin(REWRITE, &m);
	for (long long c = 0; c < chunks; c++) {
		op_start(&m);
		read_block(fd, buf, cfg.chunk);
		buf[c % cfg.chunk]++;
		if (lseek(fd, -(off_t)cfg.chunk, SEEK_CUR) < 0)
			fail_errno("lseek in", io_name);
		write_block(fd, buf, cfg.chunk);
		op_end(&m);
		check_interrupted();
	}
	close_io(fd);
	finish(REWRITE, &m, chunks);
}

static void test_getc(char *buf)
{
	FILE *fp = open_stream(open_io(0), "r");
	long long chunks = cfg.char_bytes / cfg.chunk;
	struct measure m;
	begin(GETC, &m);
	for (long long c = 0; c < chunks; c++) {
		op_start(&m);
		for (int i = 0; i < cfg.chunk; i++) {
			int ch = getc_unlocked(fp);
			if (ch == EOF)
				fail("%s ended early in the per-char read", io_name);
			buf[ch]++; /* keeps the compiler from dropping the loop, as bonnie++ */
		}
		op_end(&m);
		check_interrupted();
	}
	close_stream(fp);
	finish(GETC, &m, chunks);
}

static void test_read(char *buf)
{
	int fd = open_io(0);
	long long chunks = cfg.size / cfg.chunk;
	struct measure m;
	begin(READ, &m);
	for (long long c = 0; c < chunks; c++) {
		op_start(&m);
		read_block(fd, buf, cfg.chunk);
		op_end(&m);
		check_interrupted();
	}
	close_io(fd);
	finish(READ, &m, chunks);
}

/* ---------------------------------------------------------------------------------------------- */
/* Random seeks: forked seekers share tickets from one pipe, so a seek is always queued */

struct seeker_report {
	double start, end, cpu, latency;
	long long seeks, updates;
	int err;
	char what[48];
};

/* One ticket: a random chunk number; negative when the chunk is also to be rewritten. */
static int32_t *make_tickets(void)
{
	int32_t *tickets = malloc(sizeof(*tickets) * (cfg.seeks + cfg.seekers));
	if (!tickets)
		fail("out of memory for %d seek tickets", cfg.seeks);
	for (int i = 0; i < cfg.seeks; i++) {
		int32_t t = (int32_t)rand31();
		tickets[i] = t % UPDATE_EVERY == 0 ? -t : t;
	}
	for (int i = 0; i < cfg.seekers; i++)
		tickets[cfg.seeks + i] = END_TICKET;
	return tickets;
}

static int read_ticket(int fd, int32_t *ticket)
{
	size_t done = 0;
	while (done < sizeof(*ticket)) {
		ssize_t n = read(fd, (char *)ticket + done, sizeof(*ticket) - done);
		if (n <= 0)
			return -1;
		done += n;
	}
	return 0;
}

/* Returns 0, or sets rep->err and rep->what. */
static int seek_one(int fd, char *buf, int32_t ticket, long long chunks, struct seeker_report *rep)
{
	int update = ticket < 0;
	long long where = (update ? -(long long)ticket : ticket) % chunks;
	off_t offset = (off_t)where * cfg.chunk;
	const char *what = "lseek";
	if (lseek(fd, offset, SEEK_SET) < 0)
		goto failed;
	what = "read";
	for (int done = 0; done < cfg.chunk;) {
		ssize_t n = read(fd, buf + done, cfg.chunk - done);
		if (n <= 0) {
			errno = n == 0 ? EIO : errno;
			goto failed;
		}
		done += n;
	}
	if (!update)
		return 0;
	buf[where % cfg.chunk]--;
	what = "write";
	if (lseek(fd, offset, SEEK_SET) < 0 || write(fd, buf, cfg.chunk) != cfg.chunk)
		goto failed;
	what = "fsync";
	if (cfg.sync && fsync(fd))
		goto failed;
	rep->updates++;
	return 0;
failed:
	rep->err = errno ? errno : EIO;
	snprintf(rep->what, sizeof(rep->what), "%s in a seeker", what);
	return -1;
}

/* A seeker process: opens the file, says it is ready, then seeks while tickets come. */
static void seeker(int tickets_fd, int ready_fd, int report_fd)
{
	struct seeker_report rep = {0};
	long long chunks = cfg.size / cfg.chunk;
	char *buf = malloc(cfg.chunk);
	int fd = open(io_name, O_RDWR | O_CLOEXEC);
	int ready = write(ready_fd, "r", 1) == 1;
	int32_t ticket;
	if (fd < 0 || !buf || !ready) {
		rep.err = errno ? errno : ENOMEM;
		snprintf(rep.what, sizeof(rep.what), "open in a seeker");
	} else if (read_ticket(tickets_fd, &ticket) == 0) {
		double cpu0 = cpu_now();
		rep.start = wall_now();
		while (ticket != END_TICKET) {
			double t0 = wall_now();
			if (seek_one(fd, buf, ticket, chunks, &rep))
				break;
			double d = wall_now() - t0;
			rep.latency = d > rep.latency ? d : rep.latency;
			rep.seeks++;
			if (read_ticket(tickets_fd, &ticket))
				break;
		}
		if (!rep.err && (fsync(fd) || close(fd))) {
			rep.err = errno;
			snprintf(rep.what, sizeof(rep.what), "fsync in a seeker");
		}
		rep.end = wall_now();
		rep.cpu = cpu_now() - cpu0;
	}
	_exit(write(report_fd, &rep, sizeof(rep)) == sizeof(rep) ? 0 : 1);
}

static void make_pipe(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC))
		fail("cannot make a pipe for the seekers: %s", strerror(errno));
}

static void start_seekers(int tickets[2], int ready[2], int report[2])
{
	make_pipe(tickets);
	make_pipe(ready);
	make_pipe(report);
	fflush(NULL);
	for (int i = 0; i < cfg.seekers; i++) {
		pid_t pid = fork();
		if (pid < 0)
			fail("cannot fork seeker %d: %s", i + 1, strerror(errno));
		if (pid == 0) {
			close(tickets[1]);
			close(ready[0]);
			close(report[0]);
			seeker(tickets[0], ready[1], report[1]);
		}
		seeker_pids[seekers_running++] = pid;
	}
	close(tickets[0]);
	close(ready[1]);
	close(report[1]);
	for (int i = 0; i < cfg.seekers; i++) {
		char c;
		if (read(ready[0], &c, 1) != 1)
			fail("a seeker process died before it was ready");
	}
	close(ready[0]);
}

static void send_tickets(int fd, const int32_t *tickets)
{
	const char *p = (const char *)tickets;
	size_t left = sizeof(*tickets) * (cfg.seeks + cfg.seekers);
	while (left > 0) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EPIPE) /* every seeker stopped: their reports say why */
			break;
		if (n < 0)
			fail("cannot hand seek tickets to the seekers: %s", strerror(errno));
		p += n;
		left -= n;
	}
	close(fd);
}

static void test_seeks(void)
{
	int32_t *tickets = make_tickets();
	int tickets_pipe[2], ready_pipe[2], report_pipe[2];
	struct measure m;
	start_seekers(tickets_pipe, ready_pipe, report_pipe);
	begin(SEEKS, &m);
	send_tickets(tickets_pipe[1], tickets);
	double first_start = 0, last_end = 0, cpu = 0, latency = 0;
	long long seeks = 0;
	for (int i = 0; i < cfg.seekers; i++) {
		struct seeker_report rep;
		if (read(report_pipe[0], &rep, sizeof(rep)) != sizeof(rep))
			fail("a seeker process died without reporting");
		if (rep.err) {
			errno = rep.err;
			fail_errno(rep.what, io_name);
		}
		/* Elapsed: from the first seeker's first ticket to the last one's end, as bonnie++. */
		first_start = i == 0 || rep.start < first_start ? rep.start : first_start;
		last_end = rep.end > last_end ? rep.end : last_end;
		cpu += rep.cpu;
		latency = rep.latency > latency ? rep.latency : latency;
		seeks += rep.seeks;
		seek_updates += rep.updates;
	}
	close(report_pipe[0]);
	for (int i = 0; i < seekers_running; i++)
		waitpid(seeker_pids[i], NULL, 0);
	seekers_running = 0;
	free(tickets);
	record(SEEKS, last_end - first_start, cpu, latency, seeks);
}

/* ---------------------------------------------------------------------------------------------- */
/* The file tests: many small files in one directory or spread over several */

struct names {
	char **name;
	int *dir;
	char *pool;
};

static int dir_handle[100000];

static const char NAME_CHARS[] = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/* bonnie++'s names: a 10-hex-digit number and up to 12 random characters, the number first for
 * the sequential tests and last for the random ones; "%05d/" in front when there are directories. */
static void make_names(struct names *n, int random_order)
{
	size_t each = 6 + 10 + RAND_EXTRA_LEN + 1;
	long long per_dir = cfg.files / cfg.dirs, in_dir = 0;
	int dir = 0;
	free(n->name);
	free(n->dir);
	free(n->pool);
	n->name = malloc(sizeof(char *) * cfg.files);
	n->dir = malloc(sizeof(int) * cfg.files);
	n->pool = malloc(each * cfg.files);
	if (!n->name || !n->dir || !n->pool)
		fail("out of memory for %lld file names", cfg.files);
	for (long long i = 0; i < cfg.files; i++) {
		char extra[RAND_EXTRA_LEN + 1], *p = n->pool + i * each;
		int len = rand31() % (RAND_EXTRA_LEN + 1), at = 0;
		for (int j = 0; j < len; j++)
			extra[j] = NAME_CHARS[rand31() % (sizeof(NAME_CHARS) - 1)];
		extra[len] = '\0';
		n->name[i] = p;
		n->dir[i] = dir;
		if (cfg.dirs > 1)
			at = sprintf(p, "%05d/", dir);
		if (random_order)
			sprintf(p + at, "%s%010llx", extra, i);
		else
			sprintf(p + at, "%010llx%s", i, extra);
		if (++in_dir > per_dir) { /* bonnie++'s spreading, kept as is */
			in_dir = 0;
			dir++;
		}
	}
}

/* The same shuffle as bonnie++'s random_sort. */
static void shuffle_names(struct names *n)
{
	for (long long i = 0; i < cfg.files; i++) {
		long long j = rand31() % cfg.files;
		char *name = n->name[i];
		int dir = n->dir[i];
		n->name[i] = n->name[j];
		n->dir[i] = n->dir[j];
		n->name[j] = name;
		n->dir[j] = dir;
	}
}

static void subdir_name(char buf[SUBDIR_LEN], int dir)
{
	snprintf(buf, SUBDIR_LEN, "%05d", dir);
}

static void open_dir_handle(int dir, const char *path)
{
	if (!cfg.sync)
		return;
	dir_handle[dir] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir_handle[dir] < 0)
		fail_errno("open of directory", path);
}

/* The test directory (and its subdirectories), entered; setup, as bonnie++ does before its clock. */
static void make_test_dirs(void)
{
	if (mkdir(test_dir, 0700))
		fail_errno("mkdir of", test_dir);
	test_dir_made = 1;
	if (chdir(test_dir))
		fail_errno("chdir to", test_dir);
	if (cfg.dirs == 1)
		open_dir_handle(0, ".");
	for (int d = 0; cfg.dirs > 1 && d < cfg.dirs; d++) {
		char sub[SUBDIR_LEN];
		subdir_name(sub, d);
		if (mkdir(sub, 0700))
			fail_errno("mkdir of", sub);
		open_dir_handle(d, sub);
	}
}

static void sync_filesystem(void)
{
	if (syncfs(workdir_fd))
		fail_errno("syncfs of", "the test directory");
}

static void fsync_dir(int dir)
{
	if (cfg.sync && fsync(dir_handle[dir]))
		fail_errno("fsync of the directory of", test_dir);
}

static void create_file(const char *name, char *buf, long size, int dir)
{
	int fd = open(name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		fail_errno("create of", name);
	for (long done = 0; done < size; done += cfg.file_chunk) {
		int n = size - done < cfg.file_chunk ? (int)(size - done) : cfg.file_chunk;
		if (write(fd, buf, n) != n)
			fail_errno("write to", name);
	}
	if (cfg.sync && fsync(fd))
		fail_errno("fsync of", name);
	fsync_dir(dir);
	if (close(fd))
		fail_errno("close of", name);
}

static void test_create(enum test t, struct names *n, char *buf)
{
	long range = cfg.max_size - cfg.min_size;
	struct measure m;
	make_names(n, t == RAND_CREATE);
	make_test_dirs();
	begin(t, &m);
	for (long long i = 0; i < cfg.files; i++) {
		long size = range ? cfg.min_size + (long)(rand31() % (range + 1)) : cfg.max_size;
		op_start(&m);
		create_file(n->name[i], buf, size, n->dir[i]);
		op_end(&m);
		check_interrupted();
	}
	sync_filesystem();
	finish(t, &m, cfg.files);
}

/* stat() the file, and read it when it has data, as bonnie++'s "Read" column. */
static void stat_file(const char *name, char *buf)
{
	struct stat st;
	if (stat(name, &st))
		fail_errno("stat of", name);
	if (st.st_size == 0)
		return;
	int fd = open(name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail_errno("open of", name);
	for (off_t done = 0; done < st.st_size; done += cfg.file_chunk) {
		int n = st.st_size - done < cfg.file_chunk ? (int)(st.st_size - done) : cfg.file_chunk;
		if (read(fd, buf, n) != n)
			fail_errno("read of", name);
	}
	close(fd);
}

static void enter_subdir(int dir)
{
	char sub[SUBDIR_LEN];
	subdir_name(sub, dir);
	if (cfg.dirs > 1 && chdir(sub))
		fail_errno("chdir to", sub);
}

static void leave_subdir(int dir, int remove)
{
	char sub[SUBDIR_LEN];
	subdir_name(sub, dir);
	if (cfg.dirs > 1 && chdir(".."))
		fail_errno("chdir out of", sub);
	if (cfg.dirs > 1 && remove && rmdir(sub))
		fail_errno("rmdir of", sub);
}

/* Visits every file of the test directory in readdir order: stat()s it, or unlinks it. */
static long long walk_files(int unlink_them, char *buf, struct measure *m)
{
	long long count = 0;
	for (int d = 0; d < cfg.dirs; d++) {
		enter_subdir(d);
		DIR *dp = opendir(".");
		if (!dp)
			fail_errno("opendir of", test_dir);
		struct dirent *e;
		while ((e = readdir(dp))) {
			if (e->d_name[0] == '.') /* our names never start with a dot */
				continue;
			op_start(m);
			if (!unlink_them)
				stat_file(e->d_name, buf);
			else if (unlink(e->d_name))
				fail_errno("unlink of", e->d_name);
			else
				fsync_dir(d);
			op_end(m);
			count++;
		}
		closedir(dp);
		leave_subdir(d, unlink_them);
	}
	return count;
}

static void close_dir_handles(void)
{
	for (int d = 0; cfg.sync && d < cfg.dirs; d++)
		close(dir_handle[d]);
}

/* The end of both delete tests: the directories go too, then the filesystem is synced. */
static void remove_test_dirs(int subdirs_left)
{
	close_dir_handles();
	for (int d = 0; subdirs_left && cfg.dirs > 1 && d < cfg.dirs; d++) {
		char sub[SUBDIR_LEN];
		subdir_name(sub, d);
		if (rmdir(sub))
			fail_errno("rmdir of", sub);
	}
	if (fchdir(workdir_fd) || rmdir(test_dir))
		fail_errno("rmdir of", test_dir);
	test_dir_made = 0;
	sync_filesystem();
}

static void check_count(long long count)
{
	if (count != cfg.files)
		fail("expected %lld files in %s but found %lld", cfg.files, test_dir, count);
}

static void test_seq_stat(char *buf)
{
	struct measure m;
	begin(SEQ_STAT, &m);
	long long count = walk_files(0, buf, &m);
	check_count(count);
	finish(SEQ_STAT, &m, count);
}

static void test_seq_delete(char *buf)
{
	struct measure m;
	begin(SEQ_DELETE, &m);
	long long count = walk_files(1, buf, &m);
	check_count(count);
	remove_test_dirs(0);
	finish(SEQ_DELETE, &m, count);
}

static void test_rand_stat(struct names *n, char *buf)
{
	struct measure m;
	shuffle_names(n);
	begin(RAND_STAT, &m);
	for (long long i = 0; i < cfg.files; i++) {
		op_start(&m);
		stat_file(n->name[i], buf);
		op_end(&m);
		check_interrupted();
	}
	finish(RAND_STAT, &m, cfg.files);
}

static void test_rand_delete(struct names *n)
{
	struct measure m;
	shuffle_names(n);
	begin(RAND_DELETE, &m);
	for (long long i = 0; i < cfg.files; i++) {
		op_start(&m);
		if (unlink(n->name[i]))
			fail_errno("unlink of", n->name[i]);
		fsync_dir(n->dir[i]);
		op_end(&m);
		check_interrupted();
	}
	remove_test_dirs(1);
	finish(RAND_DELETE, &m, cfg.files);
}

/* ---------------------------------------------------------------------------------------------- */
/* Options, output, main */

static long long number(const char *opt, const char *text, long long min)
{
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (errno || *end || end == text || v < min) {
		fprintf(stderr, "bonnie engine: --%s needs a whole number >= %lld, not '%s'\n", opt, min, text);
		exit(2);
	}
	return v;
}

static void parse_options(int argc, char **argv)
{
	static const struct option opts[] = {
		{"size", 1, 0, 's'}, {"char-bytes", 1, 0, 'c'}, {"chunk", 1, 0, 'k'},
		{"seeks", 1, 0, 'S'}, {"seekers", 1, 0, 'P'}, {"files", 1, 0, 'n'},
		{"max-size", 1, 0, 'M'}, {"min-size", 1, 0, 'm'}, {"dirs", 1, 0, 'd'},
		{"file-chunk", 1, 0, 'K'}, {"sync", 0, 0, 'b'}, {"no-drop-caches", 0, 0, 'D'},
		{"seed", 1, 0, 'z'}, {0, 0, 0, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const char *name = NULL;
		for (int i = 0; opts[i].name; i++)
			if (opts[i].val == c)
				name = opts[i].name;
		switch (c) {
		case 's': cfg.size = number(name, optarg, 0); break;
		case 'c': cfg.char_bytes = number(name, optarg, 0); break;
		case 'k': cfg.chunk = number(name, optarg, 256); break;
		case 'S': cfg.seeks = number(name, optarg, 1); break;
		case 'P': cfg.seekers = number(name, optarg, 1); break;
		case 'n': cfg.files = number(name, optarg, 0); break;
		case 'M': cfg.max_size = number(name, optarg, 0); break;
		case 'm': cfg.min_size = number(name, optarg, 0); break;
		case 'd': cfg.dirs = number(name, optarg, 1); break;
		case 'K': cfg.file_chunk = number(name, optarg, 256); break;
		case 'b': cfg.sync = 1; break;
		case 'D': cfg.drop_caches = 0; break;
		case 'z': cfg.seed = (uint64_t)number(name, optarg, 0); break;
		default: exit(2);
		}
	}
	if (cfg.seekers > MAX_SEEKERS || cfg.dirs >= 100000 || cfg.size % cfg.chunk ||
	    cfg.char_bytes % cfg.chunk || cfg.char_bytes > cfg.size || cfg.min_size > cfg.max_size) {
		fprintf(stderr, "bonnie engine: inconsistent options (workloads/bonnie.py checks them)\n");
		exit(2);
	}
}

static void print_json(double total)
{
	printf("{\"phases\": [");
	for (int i = 0; i < phase_count; i++)
		printf("%s\"%s\"", i ? ", " : "", phase_names[i]);
	printf("],\n \"seed\": %" PRIu64 ", \"stdio_buffer\": %zu, \"seek_updates\": %lld,"
	       " \"drop_caches\": %s, \"elapsed_s\": %.9f,\n \"tests\": {",
	       cfg.seed, stdio_buffer, seek_updates, cfg.drop_caches ? "true" : "false", total);
	int first = 1;
	for (int t = 0; t < NTESTS; t++) {
		struct result *r = &results[t];
		if (!r->ran)
			continue;
		printf("%s\n  \"%s\": {\"elapsed_s\": %.9f, \"cpu_s\": %.6f, \"latency_s\": %.9f, \"ops\": %lld}",
		       first ? "" : ",", TEST_NAME[t], r->elapsed, r->cpu, r->latency, r->ops);
		first = 0;
	}
	printf("}}\n");
}

static void say(const char *text)
{
	fprintf(stderr, "progress: %s\n", text);
}

static void run_io_tests(char *buf)
{
	if (cfg.char_bytes > 0) {
		say("writing a byte at a time");
		test_putc();
	}
	say("writing intelligently");
	test_write(buf);
	say("rewriting");
	test_rewrite(buf);
	if (cfg.char_bytes > 0) {
		say("reading a byte at a time");
		test_getc(buf);
	}
	say("reading intelligently");
	test_read(buf);
	say("random seeks");
	test_seeks();
	if (unlink(io_name))
		fail_errno("unlink of", io_name);
	io_name[0] = '\0';
}

static void run_file_tests(char *buf)
{
	struct names names = {0};
	memset(buf, 'b', cfg.file_chunk);
	say("creating files in sequential order");
	test_create(SEQ_CREATE, &names, buf);
	say("stat of files in sequential order");
	test_seq_stat(buf);
	say("deleting files in sequential order");
	test_seq_delete(buf);
	say("creating files in random order");
	test_create(RAND_CREATE, &names, buf);
	say("stat of files in random order");
	test_rand_stat(&names, buf);
	say("deleting files in random order");
	test_rand_delete(&names);
}

int main(int argc, char **argv)
{
	parse_options(argc, argv);
	rng_state = cfg.seed;
	plan_phases();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	snprintf(io_name, sizeof(io_name), "Bonnie.%d", (int)getpid());
	snprintf(test_dir, sizeof(test_dir), "Bonnie.%d.d", (int)getpid());
	workdir_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (workdir_fd < 0)
		fail_errno("open of", "the current directory");
	int bufsize = cfg.chunk > cfg.file_chunk ? cfg.chunk : cfg.file_chunk;
	char *buf = aligned_alloc(4096, ((bufsize > 256 ? bufsize : 256) + 4095) / 4096 * 4096);
	if (!buf)
		fail("out of memory for a %d-byte buffer", bufsize);
	memset(buf, 0, bufsize);

	double start = wall_now();
	fsprof_phase(setup_phase);
	if (cfg.size > 0)
		run_io_tests(buf);
	if (cfg.files > 0)
		run_file_tests(buf);
	print_json(wall_now() - start);
	return 0;
}
