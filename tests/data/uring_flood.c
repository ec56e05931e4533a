/* More io_uring requests in flight than fsprof's map of them holds, for tests/test_io_uring.py:
 * makes the FIFO PATH (on the filesystem under test), submits N one-byte READs of it, each with its
 * own user_data (the FIFO is empty: each waits in the kernel's poll, with no io-wq worker), and
 * once all are submitted writes N bytes into it, which ends them, and reaps every completion.
 * Exits 0 only if all N were submitted and each read its byte. Prints "submitted N".
 * Build: clang -O2 -o uring_flood uring_flood.c -luring */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct io_uring_params p = { .flags = IORING_SETUP_CQSIZE };
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	int n, fd, submitted, done = 0;
	char *in, *out;

	if (argc != 3 || (n = atoi(argv[2])) <= 0 || n > 16384) {
		fprintf(stderr, "usage: uring_flood PATH N (N <= 16384)\n");
		return 2;
	}
	p.cq_entries = 2 * n;
	in = calloc(n, 1);
	out = malloc(n);
	/* O_RDWR: the open does not wait for a writer, and the FIFO always has one. */
	if (!in || !out || mkfifo(argv[1], 0600) || (fd = open(argv[1], O_RDWR)) < 0 ||
	    io_uring_queue_init_params(n, &ring, &p)) {
		perror("setup");
		return 1;
	}
	memset(out, 'x', n);
	for (int i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		io_uring_prep_read(sqe, fd, in + i, 1, 0);
		sqe->user_data = i + 1;
	}
	submitted = io_uring_submit(&ring);
	if (submitted != n || write(fd, out, n) != n) {
		perror("submit or write");
		return 1;
	}
	for (int i = 0; i < submitted; i++) {
		if (io_uring_wait_cqe(&ring, &cqe)) {
			perror("io_uring_wait_cqe");
			return 1;
		}
		done += cqe->res == 1;
		io_uring_cqe_seen(&ring, cqe);
	}
	printf("submitted %d\n", submitted);
	io_uring_queue_exit(&ring);
	unlink(argv[1]);
	return done != n;
}
