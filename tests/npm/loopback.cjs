// Preloaded (node --require) into the npm reference servers under test: whatever
// port and host a server asks for, it listens on 127.0.0.1 on a port the kernel
// picks, and reports it on stderr as "LISTENING <port>" for the test to read.
//
// With LOOPBACK_CONNECTIONS=1 in the environment it also counts the TCP
// connections the server accepts, and on SIGUSR2 writes
// "CONNECTIONS <accepted so far> <open now>" to stderr (for benchmarks that
// check whether clients reuse connections).
"use strict";
const net = require("node:net");

const counting = process.env.LOOPBACK_CONNECTIONS === "1";
const servers = [];
if (counting) {
  process.on("SIGUSR2", () => {
    const accepted = servers.reduce((sum, s) => sum + s.accepted, 0);
    const open = servers.reduce((sum, s) => sum + s.open, 0);
    process.stderr.write(`CONNECTIONS ${accepted} ${open}\n`);
  });
}

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callback = args.find((arg) => typeof arg === "function");
  this.once("listening", () => {
    process.stderr.write(`LISTENING ${this.address().port}\n`);
  });
  if (counting) {
    const counts = { accepted: 0, open: 0 };
    servers.push(counts);
    this.on("connection", (socket) => {
      counts.accepted += 1;
      counts.open += 1;
      socket.once("close", () => {
        counts.open -= 1;
      });
    });
  }
  return listen.call(this, { port: 0, host: "127.0.0.1" }, callback);
};
