/* A STAND-IN for the otel collector of Config Sync's Pods (PLAYED BY US; see controlplane/images.py):
 * it answers the health check Config Sync's manifests probe (any request on port 13133: 200) and exits
 * on SIGTERM. It collects nothing. Built static with gcc, like the pause image. */
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void stop(int signum) { (void)signum; _exit(0); }

int main(void) {
  static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
  struct sockaddr_in address;
  char request[4096];
  int one = 1, server = socket(AF_INET, SOCK_STREAM, 0);
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  if (server < 0) return 1;
  setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_port = htons(13133);
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(server, (struct sockaddr *)&address, sizeof address) < 0 || listen(server, 16) < 0) return 1;
  for (;;) {
    int client = accept(server, NULL, NULL);
    if (client < 0) continue;
    (void)read(client, request, sizeof request);
    (void)write(client, reply, sizeof reply - 1);
    close(client);
  }
}
