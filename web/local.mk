# web/: the HTTP/1.1 JSON API (docs/api.md) on h2o, sharing the controller's libuv loop.
noinst_LIBRARIES += web/libweb.a
web_libweb_a_SOURCES = web/http.c web/http.h web/internal.h web/api.c web/api_store.c \
	web/api_ckpt.c web/api_rollout.c
web_libweb_a_CFLAGS = $(AM_CFLAGS) $(H2O_CFLAGS) $(OPENSSL_CFLAGS) $(RAFT_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SQLITE_CFLAGS)
