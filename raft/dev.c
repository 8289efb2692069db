/* dev.c: `yardd --dev` (see dev.h): the join token, the supervised yard-agent child, and the
 * banner with the API URL and the admin token. */
#include "raft/dev.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/common.h"
#include "jobs/sha256.h"

static struct {
	uv_loop_t *loop;
	struct consensus *cons;
	struct fsm *fsm;
	struct dev_options opt; /* its strings point to the copies below */
	char data_dir[PATH_MAX], api_url[256], admin_token_path[PATH_MAX];
	char join_path[PATH_MAX];
	char join_secret[SHA256_HEX_LEN + 1];
	char join_hash[SHA256_HEX_LEN + 1];
	char agent_path[PATH_MAX];
	uv_process_t agent;
	int agent_running;
	int token_in_flight;
	int stopping;
	int banner_shown;
	uv_timer_t restart_timer;
} dev;

static int read_secret(const char *path, char *out, size_t out_len)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	int ok = fgets(out, (int)out_len, f) != NULL;
	fclose(f);
	out[strcspn(out, "\r\n")] = '\0';
	return ok && out[0] != '\0' ? 0 : -1;
}

static int write_secret(const char *path, const char *secret)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	int ok =
	    write(fd, secret, strlen(secret)) == (ssize_t)strlen(secret) && write(fd, "\n", 1) == 1;
	close(fd);
	return ok ? 0 : -1;
}

int dev_init(uv_loop_t *loop, struct consensus *c, struct fsm *f, const struct dev_options *opt,
             struct yard_err *err)
{
	memset(&dev, 0, sizeof dev);
	dev.loop = loop;
	dev.cons = c;
	dev.fsm = f;
	dev.opt = *opt;
	snprintf(dev.data_dir, sizeof dev.data_dir, "%s", opt->data_dir);
	snprintf(dev.api_url, sizeof dev.api_url, "%s", opt->api_url);
	snprintf(dev.admin_token_path, sizeof dev.admin_token_path, "%s", opt->admin_token_path);
	dev.opt.data_dir = dev.data_dir;
	dev.opt.api_url = dev.api_url;
	dev.opt.admin_token_path = dev.admin_token_path;
	snprintf(dev.join_path, sizeof dev.join_path, "%s/dev-join.token", opt->data_dir);
	if (read_secret(dev.join_path, dev.join_secret, sizeof dev.join_secret) != 0) {
		unsigned char raw[32];
		if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
			return yard_err_set(err, YARD_EIO, "no randomness for the dev join token");
		sha256_to_hex(raw, dev.join_secret);
		if (write_secret(dev.join_path, dev.join_secret) != 0)
			return yard_err_set(err, YARD_EIO, "cannot write %s: %s", dev.join_path,
			                    strerror(errno));
	}
	sha256_hex(dev.join_secret, strlen(dev.join_secret), dev.join_hash);
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return yard_err_set(err, YARD_EIO, "cannot find this executable: %s",
		                    strerror(errno));
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(dev.agent_path, sizeof dev.agent_path, "%s/yard-agent", self);
	if (access(dev.agent_path, X_OK) != 0)
		return yard_err_set(err, YARD_ENOTFOUND,
		                    "--dev needs yard-agent next to yardd (%s): %s", dev.agent_path,
		                    strerror(errno));
	uv_timer_init(loop, &dev.restart_timer);
	return 0;
}

static void start_agent(void);

static void restart_later(uv_timer_t *t)
{
	start_agent();
}

static void agent_exited(uv_process_t *p, int64_t status, int sig)
{
	dev.agent_running = 0;
	uv_close((uv_handle_t *)p, NULL);
	if (dev.stopping)
		return;
	log_warn("dev: yard-agent exited (code %lld, signal %d); restarting it in 1 s",
	         (long long)status, sig);
	uv_timer_start(&dev.restart_timer, restart_later, 1000, 0);
}

static void banner(void)
{
	char admin[512] = "";
	if (dev.banner_shown || read_secret(dev.opt.admin_token_path, admin, sizeof admin) != 0)
		return;
	dev.banner_shown = 1;
	printf("trainyard dev cluster (one controller, one agent)\n"
	       "  API:    %s\n"
	       "  token:  %s  (in %s)\n"
	       "  agent:  node \"dev\" with %d CPU device(s); log %s/agent.log\n"
	       "  try:    curl -H 'Authorization: Bearer %s' %s/v1/nodes\n",
	       dev.opt.api_url, admin, dev.opt.admin_token_path, dev.opt.devices, dev.opt.data_dir,
	       admin, dev.opt.api_url);
	fflush(stdout);
}

static void start_agent(void)
{
	char data[PATH_MAX + 8], log_path[PATH_MAX + 16], devices[16], port[16];
	if (dev.agent_running || dev.stopping)
		return;
	snprintf(data, sizeof data, "%s/agent", dev.opt.data_dir);
	snprintf(log_path, sizeof log_path, "%s/agent.log", dev.opt.data_dir);
	snprintf(devices, sizeof devices, "cpu:%d", dev.opt.devices);
	snprintf(port, sizeof port, "%d", dev.opt.port_base);
	char *args[] = {dev.agent_path,
	                "--controllers",
	                (char *)dev.opt.api_url,
	                "--join-token-file",
	                dev.join_path,
	                "--data-dir",
	                data,
	                "--name",
	                "dev",
	                "--devices",
	                devices,
	                "--port-base",
	                port,
	                NULL};
	int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		log_error("dev: cannot open %s: %s", log_path, strerror(errno));
		return;
	}
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
	                                 {.flags = UV_INHERIT_FD, .data.fd = log_fd},
	                                 {.flags = UV_INHERIT_FD, .data.fd = log_fd}};
	uv_process_options_t o = {0};
	o.file = args[0];
	o.args = args;
	o.exit_cb = agent_exited;
	o.stdio = stdio;
	o.stdio_count = 3;
	int rc = uv_spawn(dev.loop, &dev.agent, &o);
	close(log_fd);
	if (rc != 0) {
		log_error("dev: cannot start %s: %s", dev.agent_path, uv_strerror(rc));
		uv_close((uv_handle_t *)&dev.agent, NULL);
		return;
	}
	dev.agent_running = 1;
	log_info("dev: started yard-agent (pid %d) with %d CPU device(s); log %s", dev.agent.pid,
	         dev.opt.devices, log_path);
}

static void join_token_done(void *data, int status, const void *result)
{
	const char *error = result ? json_string_value(json_object_get(result, "error")) : NULL;
	dev.token_in_flight = 0;
	if (status != 0 || error != NULL) {
		log_warn("dev: join token not created (%s); retrying when leading again",
		         status != 0 ? yard_strerror(status) : error);
		return;
	}
	dev_leader_up();
}

void dev_leader_up(void)
{
	struct yard_err err = {0};
	char role[16], name[FSM_NAME_MAX + 1];
	if (dev.loop == NULL || dev.stopping)
		return;
	banner();
	if (fsm_token_lookup(dev.fsm, dev.join_hash, yard_now_wall_ms(), role, name, NULL, &err) ==
	    0) {
		start_agent();
		return;
	}
	if (dev.token_in_flight || fsm_tokens_count(dev.fsm) == 0)
		return; /* the admin token comes first; called again once it exists */
	size_t len = 0;
	char *cmd = fsm_command_encode(
	    "token.create",
	    json_pack("{s:s,s:s,s:s}", "name", "dev-agent", "role", "agent", "hash", dev.join_hash),
	    NULL, yard_now_wall_ms(), "yardd", "admin", &len);
	if (consensus_submit(dev.cons, cmd, len, join_token_done, NULL, &err) == 0)
		dev.token_in_flight = 1;
	else
		log_warn("dev: join token: %s", err.msg);
	free(cmd);
}

void dev_stop(void)
{
	if (dev.loop == NULL)
		return;
	dev.stopping = 1;
	uv_timer_stop(&dev.restart_timer);
	if (dev.agent_running)
		uv_process_kill(&dev.agent, SIGTERM);
}
