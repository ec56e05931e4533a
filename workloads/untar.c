/* untar engine: extract the first N entries of a plain tarball into the cwd with libarchive (as
 * bsdtar does: archive_read_* + archive_write_disk_*), then syncfs() the cwd's filesystem.
 *
 * The tarball is mapped and populated before the measured phase, and libarchive parses it in
 * place; each file's data is written in the pieces GNU tar's 10 KiB record reads cut it into, so
 * the filesystem under test sees GNU tar's write() calls, without the tarball's read() calls
 * (which are on another filesystem, and not what is measured).
 *
 * This process is what fsprof traces, so it does nothing but the extraction inside the measured
 * phases. Phase 1 "extract": from the first header read to archive_write_close() (which applies the
 * deferred directory modes and times, as GNU tar does at its end). Phase 2 "sync": syncfs().
 *
 * Output on stdout: optional "progress ENTRIES BYTES" lines (--progress), then one JSON object with
 * the raw figures; workloads/untar.py turns them into the result and the sentences.
 */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "phase.h"

enum { PHASE_EXTRACT = 1, PHASE_SYNC = 2 };

struct options {
	const char *tarball;
	long long max_entries; /* extract at most this many entries */
	size_t record_size;    /* writes are cut at the tarball's record boundaries, as GNU tar's are */
	int progress;
	int restore_owner;     /* GNU tar's default as root: --same-owner --same-permissions */
};

struct counts {
	long long entries, files, dirs, symlinks, hardlinks, other;
	long long bytes;       /* regular files' data written */
	long long warnings;
};

struct failure {
	int errnum;            /* 0 when none */
	long long entry;       /* 0-based index of the entry that failed */
	char where[64];        /* which step failed */
	char path[4096];
	char message[1024];
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* user + system CPU time of this process so far */
static uint64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

static void usage_exit(const char *why)
{
	fprintf(stderr, "untar engine: %s\n"
		"usage: untar --tar FILE [--entries N] [--record-size BYTES] [--progress] [--no-owner]\n", why);
	exit(2);
}

static struct options parse_options(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"tar", required_argument, NULL, 't'},
		{"entries", required_argument, NULL, 'n'},
		{"record-size", required_argument, NULL, 'r'},
		{"progress", no_argument, NULL, 'p'},
		{"no-owner", no_argument, NULL, 'o'},
		{NULL, 0, NULL, 0},
	};
	struct options o = { NULL, -1, 10240, 0, geteuid() == 0 };
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 't': o.tarball = optarg; break;
		case 'n': o.max_entries = atoll(optarg); break;
		case 'r': o.record_size = (size_t)atoll(optarg); break;
		case 'p': o.progress = 1; break;
		case 'o': o.restore_owner = 0; break;
		default: usage_exit("unknown option");
		}
	}
	if (!o.tarball)
		usage_exit("--tar is required");
	if (o.record_size < 512 || o.record_size % 512)
		usage_exit("--record-size must be a positive multiple of 512");
	return o;
}

static void fail(struct failure *f, long long entry, const char *where, const char *path,
		 int errnum, const char *message)
{
	f->errnum = errnum ? errnum : EIO;
	f->entry = entry;
	snprintf(f->where, sizeof(f->where), "%s", where);
	snprintf(f->path, sizeof(f->path), "%s", path ? path : "");
	snprintf(f->message, sizeof(f->message), "%s", message ? message : strerror(f->errnum));
}

static void fail_archive(struct failure *f, long long entry, const char *where, const char *path,
			 struct archive *a)
{
	fail(f, entry, where, path, archive_errno(a), archive_error_string(a));
}

/* The tarball, mapped: libarchive parses it in place, and a data block's place in the mapping is
 * its offset in the tarball, which says where GNU tar's records would cut it. */
struct input {
	const char *base;
	size_t size;
	size_t record;
};

/* The bytes from `at` up to the next record boundary of the tarball (at most `left`). */
static size_t to_record_end(const struct input *in, const char *at, size_t left)
{
	size_t pos = (size_t)(at - in->base), room;

	if (at < in->base || pos >= in->size) /* not in the mapping (libarchive copied it) */
		return left < in->record ? left : in->record;
	room = in->record - pos % in->record;
	return left < room ? left : room;
}

/* Copies one entry's data, one write() per record piece as GNU tar does; returns 0, or -1 with
 * *f filled. */
static int copy_data(const struct input *input, struct archive *in, struct archive *out,
		     struct counts *c, long long entry, const char *path, struct failure *f)
{
	for (;;) {
		const void *buf;
		size_t size;
		la_int64_t offset;
		int r = archive_read_data_block(in, &buf, &size, &offset);

		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN) {
			fail_archive(f, entry, "read", path, in);
			return -1;
		}
		for (const char *p = buf; size > 0;) {
			size_t piece = to_record_end(input, p, size);

			if (archive_write_data_block(out, p, piece, offset) < ARCHIVE_WARN) {
				fail_archive(f, entry, "write", path, out);
				return -1;
			}
			p += piece;
			offset += (la_int64_t)piece;
			size -= piece;
			c->bytes += (long long)piece;
		}
	}
}

static void count_type(struct counts *c, struct archive_entry *e)
{
	if (archive_entry_hardlink(e)) {
		c->hardlinks++;
		return;
	}
	switch (archive_entry_filetype(e)) {
	case AE_IFREG: c->files++; break;
	case AE_IFDIR: c->dirs++; break;
	case AE_IFLNK: c->symlinks++; break;
	default: c->other++; break;
	}
}

/* Maps the tarball with its pages populated now, before the measured phase: the extraction then
 * neither reads nor faults, and times the filesystem under test only. */
static int map_input(const struct options *o, struct input *input, struct failure *f)
{
	struct stat st;
	int fd = open(o->tarball, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) != 0) {
		fail(f, 0, "open tarball", o->tarball, errno, NULL);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	input->size = (size_t)st.st_size;
	input->record = o->record_size;
	if (input->size == 0) {
		close(fd);
		fail(f, 0, "map tarball", o->tarball, EINVAL, "the tarball is empty");
		return -1;
	}
	input->base = mmap(NULL, input->size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	if (input->base == MAP_FAILED) {
		fail(f, 0, "map tarball", o->tarball, errno, NULL);
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static struct archive *open_reader(const struct options *o, const struct input *input, struct failure *f)
{
	struct archive *in = archive_read_new();

	/* Plain tar only: the workload decompressed it beforehand so xz is not what we time. */
	archive_read_support_format_tar(in);
	archive_read_support_filter_none(in);
	if (archive_read_open_memory(in, input->base, input->size) != ARCHIVE_OK) {
		fail_archive(f, 0, "open tarball", o->tarball, in);
		return NULL;
	}
	return in;
}

static struct archive *open_writer(const struct options *o)
{
	struct archive *out = archive_write_disk_new();
	/* What GNU tar restores by default: mtimes always; owners and exact modes (no umask) as
	 * root; no ACLs, xattrs or file flags (GNU tar needs --acls/--xattrs for those). Members
	 * with ".." or an absolute path are refused (GNU tar skips the former, strips the "/" of
	 * the latter); symlinks on the way are not checked (GNU tar defers dangerous links). */
	int flags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
		    ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;

	if (o->restore_owner)
		flags |= ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM;
	archive_write_disk_set_options(out, flags);
	archive_write_disk_set_standard_lookup(out); /* user/group names first, as GNU tar */
	return out;
}

static void report_progress(const struct counts *c, uint64_t *last_ns)
{
	uint64_t t = now_ns();

	if (t - *last_ns < 250000000ull)
		return;
	*last_ns = t;
	printf("progress %lld %lld\n", c->entries, c->bytes);
	fflush(stdout);
}

/* Extracts up to o->max_entries entries; returns 0, or -1 with *f filled. */
static int extract(const struct options *o, const struct input *input, struct archive *in,
		   struct archive *out, struct counts *c, struct failure *f)
{
	struct archive_entry *e;
	uint64_t last_progress = now_ns();

	while (o->max_entries < 0 || c->entries < o->max_entries) {
		int r = archive_read_next_header(in, &e);
		const char *path;

		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			fail_archive(f, c->entries, "read header", NULL, in);
			return -1;
		}
		path = archive_entry_pathname(e);
		r = archive_write_header(out, e);
		if (r < ARCHIVE_WARN) {
			fail_archive(f, c->entries, "create", path, out);
			return -1;
		}
		c->warnings += r == ARCHIVE_WARN;
		if (archive_entry_size(e) > 0 && copy_data(input, in, out, c, c->entries, path, f))
			return -1;
		r = archive_write_finish_entry(out);
		if (r < ARCHIVE_WARN) {
			fail_archive(f, c->entries, "finish", path, out);
			return -1;
		}
		c->warnings += r == ARCHIVE_WARN;
		count_type(c, e);
		c->entries++;
		if (o->progress)
			report_progress(c, &last_progress);
	}
	if (archive_write_close(out) < ARCHIVE_WARN) { /* deferred directory modes and times */
		fail_archive(f, c->entries, "restore directory times", NULL, out);
		return -1;
	}
	return 0;
}

/* Dirty and Writeback (kB) from /proc/meminfo; -1 when unreadable. */
static void read_meminfo(long long *dirty_kb, long long *writeback_kb)
{
	char line[256];
	FILE *m = fopen("/proc/meminfo", "re");

	*dirty_kb = *writeback_kb = -1;
	if (!m)
		return;
	while (fgets(line, sizeof(line), m)) {
		sscanf(line, "Dirty: %lld kB", dirty_kb);
		sscanf(line, "Writeback: %lld kB", writeback_kb);
	}
	fclose(m);
}

/* syncfs() of the cwd's filesystem: the one under test, and only it. */
static int sync_cwd_fs(struct failure *f, long long entries)
{
	int fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || syncfs(fd) != 0) {
		fail(f, entries, "syncfs", ".", errno, NULL);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static void print_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

struct timings {
	uint64_t extract_ns, extract_cpu_ns, sync_ns;
	long long dirty_kb, writeback_kb;           /* right after the extraction */
	long long dirty_after_sync_kb, writeback_after_sync_kb;
	int synced;
};

static void print_result(const struct options *o, const struct counts *c, const struct timings *t,
			 const struct failure *f)
{
	printf("{\"entries\": %lld, \"files\": %lld, \"dirs\": %lld, \"symlinks\": %lld, "
	       "\"hardlinks\": %lld, \"other\": %lld, \"bytes\": %lld, \"warnings\": %lld, "
	       "\"record_size\": %zu, \"restore_owner\": %s, \"extract_ns\": %llu, "
	       "\"extract_cpu_ns\": %llu, ",
	       c->entries, c->files, c->dirs, c->symlinks, c->hardlinks, c->other, c->bytes,
	       c->warnings, o->record_size, o->restore_owner ? "true" : "false",
	       (unsigned long long)t->extract_ns, (unsigned long long)t->extract_cpu_ns);
	if (t->synced)
		printf("\"sync_ns\": %llu, \"dirty_after_sync_kb\": %lld, \"writeback_after_sync_kb\": %lld, ",
		       (unsigned long long)t->sync_ns, t->dirty_after_sync_kb, t->writeback_after_sync_kb);
	printf("\"dirty_kb\": %lld, \"writeback_kb\": %lld", t->dirty_kb, t->writeback_kb);
	if (f->errnum) {
		printf(", \"error\": {\"errno\": %d, \"errname\": ", f->errnum);
		print_json_string(strerrorname_np(f->errnum) ? strerrorname_np(f->errnum) : "");
		printf(", \"entry\": %lld, \"where\": ", f->entry);
		print_json_string(f->where);
		printf(", \"path\": ");
		print_json_string(f->path);
		printf(", \"message\": ");
		print_json_string(f->message);
		putchar('}');
	}
	printf("}\n");
}

int main(int argc, char **argv)
{
	struct options o = parse_options(argc, argv);
	struct counts c = {0};
	struct timings t = {0};
	struct failure f = {0};
	struct input input = {0};
	struct archive *in = map_input(&o, &input, &f) ? NULL : open_reader(&o, &input, &f);
	struct archive *out = open_writer(&o);
	uint64_t t0, cpu0;

	if (in) {
		fsprof_phase(PHASE_EXTRACT);
		cpu0 = cpu_ns();
		t0 = now_ns();
		int rc = extract(&o, &input, in, out, &c, &f);
		t.extract_ns = now_ns() - t0;
		t.extract_cpu_ns = cpu_ns() - cpu0;
		read_meminfo(&t.dirty_kb, &t.writeback_kb);
		if (rc == 0) {
			fsprof_phase(PHASE_SYNC);
			t0 = now_ns();
			t.synced = sync_cwd_fs(&f, c.entries) == 0;
			t.sync_ns = now_ns() - t0;
			read_meminfo(&t.dirty_after_sync_kb, &t.writeback_after_sync_kb);
		}
		archive_read_free(in);
	}
	archive_write_free(out);
	print_result(&o, &c, &t, &f);
	return f.errnum ? 1 : 0;
}
