/* Path operations through io_uring, for tests/test_io_uring.py. In DIR (on the filesystem under
 * test), N times, one request at a time: MKDIRAT "dI" relative to a dirfd of DIR, OPENAT "fI"
 * (O_CREAT) relative to it, OPENAT of the same file by its absolute path, STATX of it relative and
 * absolute, LINKAT "fI" to "lI" and SYMLINKAT "sI" to "fI" (relative), RENAMEAT "fI" to "gI"
 * (relative) and "gI" to DIR/hI (an absolute new path), UNLINKAT of "hI", "lI" and "sI"
 * (relative). Prints, per opcode, the requests that succeeded: "openat 2000".
 * Build: clang -O2 -o uring_paths uring_paths.c -luring */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct io_uring ring;

/* Submits the SQE prepared and waits for its CQE: its result. */
static int run(void)
{
	struct io_uring_cqe *cqe;
	int res;

	if (io_uring_submit(&ring) != 1 || io_uring_wait_cqe(&ring, &cqe)) {
		perror("io_uring");
		exit(1);
	}
	res = cqe->res;
	io_uring_cqe_seen(&ring, cqe);
	return res;
}

int main(int argc, char **argv)
{
	char dir[PATH_MAX], rel[64], name[64], abs[PATH_MAX + 64];
	int n, dfd, fd, ok_mkdir = 0, ok_open = 0, ok_statx = 0, ok_unlink = 0, ok_link = 0, ok_symlink = 0,
	    ok_rename = 0;
	struct statx stx;

	if (argc != 3 || !realpath(argv[1], dir) || (n = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: uring_paths DIR N\n");
		return 2;
	}
	if (io_uring_queue_init(8, &ring, 0) || (dfd = open(dir, O_DIRECTORY | O_RDONLY)) < 0) {
		perror("setup");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		snprintf(rel, sizeof(rel), "d%d", i);
		io_uring_prep_mkdirat(io_uring_get_sqe(&ring), dfd, rel, 0755);
		ok_mkdir += run() == 0;

		snprintf(rel, sizeof(rel), "f%d", i);
		snprintf(abs, sizeof(abs), "%s/%s", dir, rel);
		io_uring_prep_openat(io_uring_get_sqe(&ring), dfd, rel, O_CREAT | O_WRONLY, 0644);
		fd = run();
		ok_open += fd >= 0;
		if (fd >= 0)
			close(fd);
		io_uring_prep_openat(io_uring_get_sqe(&ring), AT_FDCWD, abs, O_RDONLY, 0);
		fd = run();
		ok_open += fd >= 0;
		if (fd >= 0)
			close(fd);

		io_uring_prep_statx(io_uring_get_sqe(&ring), dfd, rel, 0, STATX_BASIC_STATS, &stx);
		ok_statx += run() == 0;
		io_uring_prep_statx(io_uring_get_sqe(&ring), AT_FDCWD, abs, 0, STATX_BASIC_STATS, &stx);
		ok_statx += run() == 0;

		snprintf(name, sizeof(name), "l%d", i);
		io_uring_prep_linkat(io_uring_get_sqe(&ring), dfd, rel, dfd, name, 0);
		ok_link += run() == 0;
		snprintf(name, sizeof(name), "s%d", i);
		io_uring_prep_symlinkat(io_uring_get_sqe(&ring), rel, dfd, name);
		ok_symlink += run() == 0;

		snprintf(name, sizeof(name), "g%d", i);
		io_uring_prep_renameat(io_uring_get_sqe(&ring), dfd, rel, dfd, name, 0);
		ok_rename += run() == 0;
		snprintf(abs, sizeof(abs), "%s/h%d", dir, i);
		io_uring_prep_renameat(io_uring_get_sqe(&ring), dfd, name, AT_FDCWD, abs, 0);
		ok_rename += run() == 0;

		for (const char *prefix = "hls"; *prefix; prefix++) {
			snprintf(name, sizeof(name), "%c%d", *prefix, i);
			io_uring_prep_unlinkat(io_uring_get_sqe(&ring), dfd, name, 0);
			ok_unlink += run() == 0;
		}
	}
	printf("mkdirat %d\nopenat %d\nstatx %d\nlinkat %d\nsymlinkat %d\nrenameat %d\nunlinkat %d\n", ok_mkdir,
	       ok_open, ok_statx, ok_link, ok_symlink, ok_rename, ok_unlink);
	io_uring_queue_exit(&ring);
	return 0;
}
