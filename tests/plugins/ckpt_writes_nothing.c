/* A checkpoint writer that reports success and writes nothing, or (LOOM_TEST_ZEROS) files of the
 * right size holding only zeros: the runtime must notice before it publishes the checkpoint, and
 * keep the previous one and `latest`. */
#include <loom/plugin.h>
#include <stdio.h>
#include <string.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h;
  (void)o;
  (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }
static loom_status save(void* self, const char* dir, const char* name, const void* data,
                        size_t bytes, loom_error* e) {
  (void)self;
  (void)data;
  (void)e;
#if defined(LOOM_TEST_ZEROS)
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (!f) return LOOM_SYSTEM;
  static const char zeros[4096];
  for (size_t done = 0; done < bytes; done += sizeof zeros)
    fwrite(zeros, 1, bytes - done < sizeof zeros ? bytes - done : sizeof zeros, f);
  fclose(f);
#else
  (void)dir;
  (void)name;
  (void)bytes;
#endif
  return LOOM_OK;
}
static loom_status finish(void* self, loom_error* e) {
  (void)self;
  (void)e;
  return LOOM_OK;
}

static const loom_ckpt_v2 table = {
    .base = {.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_ckpt_v2)},
             .kind = LOOM_KIND_CKPT,
#if defined(LOOM_TEST_ZEROS)
             .name = "zeros",
             .summary = "saves files of the right size, all zeros",
#else
             .name = "nowrite",
             .summary = "says it saved; saves nothing",
#endif
             .version = "0.0.1",
             .create = create,
             .destroy = destroy},
    .save = save,
    .finish = finish};
static const loom_plugin* const list[] = {&table.base};

LOOM_EXPORT loom_status loom_plugin_entry_v3(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host;
  (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
