/*
 * replay_main.c - the main a fuzz target links when it is not built with libFuzzer: every file
 * named on the command line (a directory: every file in it, sorted) goes once through
 * LLVMFuzzerTestOneInput. `make test` runs each target's corpus this way under ASan+UBSan, so a
 * crash found by a campaign and saved in fuzz/corpus/<target>/ stays fixed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                perror(path);
                return -1;
        }
        size_t cap = 4096, n = 0, k;
        uint8_t *buf = malloc(cap);
        while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
                n += k;
                if (n == cap) {
                        uint8_t *b = realloc(buf, cap *= 2);
                        if (!b) {
                                free(buf);
                                buf = NULL;
                        }
                        buf = b;
                }
        }
        fclose(f);
        if (!buf)
                return -1;
        /* libFuzzer hands over a buffer of exactly the input's size: do the same so that a read
         * past the end is caught. */
        uint8_t *exact = malloc(n ? n : 1);
        if (!exact) {
                free(buf);
                return -1;
        }
        memcpy(exact, buf, n);
        free(buf);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
        return 0;
}

static int cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, int *count)
{
        DIR *d = opendir(dir);
        if (!d) {
                perror(dir);
                return -1;
        }
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char **nn = realloc(names, (n + 1) * sizeof *names);
                if (!nn)
                        break;
                names = nn;
                size_t len = strlen(dir) + strlen(de->d_name) + 2;
                names[n] = malloc(len);
                snprintf(names[n++], len, "%s/%s", dir, de->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp);
        int rc = 0;
        for (size_t i = 0; i < n; i++) {
                rc |= run_file(names[i]);
                (*count)++;
                free(names[i]);
        }
        free(names);
        return rc;
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
                return 2;
        }
        if (LLVMFuzzerInitialize)
                LLVMFuzzerInitialize(&argc, &argv);
        int count = 0, rc = 0;
        for (int i = 1; i < argc; i++) {
                struct stat sb;
                if (stat(argv[i], &sb)) {
                        perror(argv[i]);
                        return 1;
                }
                if (S_ISDIR(sb.st_mode)) {
                        rc |= run_dir(argv[i], &count);
                } else {
                        rc |= run_file(argv[i]);
                        count++;
                }
        }
        printf("%s: %d inputs replayed\n", argv[0], count);
        return rc || count == 0 ? 1 : 0;
}
