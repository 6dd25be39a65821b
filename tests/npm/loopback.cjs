// Preloaded (node --require) into the npm reference servers under test: whatever
// port and host a server asks for, it listens on 127.0.0.1 on a port the kernel
// picks, and reports it on stderr as "LISTENING <port>" for the test to read.
"use strict";
const net = require("node:net");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callback = args.find((arg) => typeof arg === "function");
  this.once("listening", () => {
    process.stderr.write(`LISTENING ${this.address().port}\n`);
  });
  return listen.call(this, { port: 0, host: "127.0.0.1" }, callback);
};
