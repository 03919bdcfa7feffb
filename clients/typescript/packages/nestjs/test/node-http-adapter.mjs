// The smallest Nest HTTP platform there is, on node:http, for the tests only:
// the workspace pins no @nestjs/platform-express, and the callbacks'
// controller has to be reached over HTTP — its route, its 204, Nest's own
// 401 and 500 — as the gateway reaches it. Exact paths, JSON bodies (kept raw
// with `rawBody: true`, as Express and Fastify keep them), nothing else.

import { createServer } from 'node:http';

import { AbstractHttpAdapter } from '@nestjs/core';

/** Routes and middleware, as the adapter's `instance`. */
class Router {
  routes = [];
  middleware = [];
  notFound = (req, res) => {
    res.statusCode = 404;
    res.end();
  };
  errorHandler = undefined;

  use(...args) {
    const handler = args.at(-1);
    const prefix = typeof args[0] === 'string' ? args[0] : '';
    this.middleware.push({ prefix, handler });
    return this;
  }

  route(method, path, handler) {
    this.routes.push({ method, path: normalized(path), handler });
    return this;
  }

  async handle(req, res) {
    try {
      for (const { prefix, handler } of this.middleware) {
        if (!req.path.startsWith(prefix)) continue;
        await new Promise((resolve, reject) => {
          const next = (error) => (error ? reject(error) : resolve());
          Promise.resolve(handler(req, res, next)).catch(reject);
        });
      }
      const route = this.routes.find((r) => r.method === req.method && r.path === normalized(req.path));
      if (!route) return this.notFound(req, res);
      await route.handler(req, res, () => this.notFound(req, res));
    } catch (error) {
      if (this.errorHandler) return this.errorHandler(error, req, res, () => {});
      res.statusCode = 500;
      res.end(String(error));
    }
  }
}

for (const method of ['get', 'post', 'put', 'patch', 'delete', 'head', 'options', 'all']) {
  Router.prototype[method] = function (path, handler) {
    return this.route(method.toUpperCase(), path, handler);
  };
}

function normalized(path) {
  return `/${String(path).replace(/^\/+|\/+$/g, '')}`;
}

export class NodeHttpAdapter extends AbstractHttpAdapter {
  constructor() {
    super(new Router());
  }

  initHttpServer() {
    this.httpServer = createServer((req, res) => {
      req.path = new URL(req.url, 'http://nest').pathname;
      void this.instance.handle(req, res);
    });
  }

  listen(port, hostname, callback) {
    return this.httpServer.listen(port, hostname, callback);
  }

  close() {
    this.httpServer?.closeAllConnections?.();
    return new Promise((resolve) => (this.httpServer ? this.httpServer.close(() => resolve()) : resolve()));
  }

  getType() {
    return 'node-http-test';
  }

  registerParserMiddleware(_prefix, rawBody) {
    this.instance.use(async (req, _res, next) => {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const bytes = Buffer.concat(chunks);
      if (rawBody) req.rawBody = bytes;
      const type = req.headers['content-type'] ?? '';
      req.body = bytes.length && /json/.test(type) ? JSON.parse(bytes.toString('utf8')) : undefined;
      next();
    });
  }

  setErrorHandler(handler) {
    this.instance.errorHandler = handler;
  }

  setNotFoundHandler(handler) {
    this.instance.notFound = handler;
  }

  status(response, statusCode) {
    response.statusCode = statusCode;
  }

  reply(response, body, statusCode) {
    if (statusCode) response.statusCode = statusCode;
    if (body === undefined || body === null || body === '') return response.end();
    if (typeof body === 'object' && !Buffer.isBuffer(body)) {
      response.setHeader('content-type', 'application/json');
      return response.end(JSON.stringify(body));
    }
    return response.end(String(body));
  }

  end(response, message) {
    response.end(message);
  }

  isHeadersSent(response) {
    return response.headersSent;
  }

  getHeader(response, name) {
    return response.getHeader(name);
  }

  setHeader(response, name, value) {
    response.setHeader(name, value);
  }

  appendHeader(response, name, value) {
    response.appendHeader(name, value);
  }

  getRequestHostname(request) {
    return request.headers.host;
  }

  getRequestMethod(request) {
    return request.method;
  }

  getRequestUrl(request) {
    return request.url;
  }

  createMiddlewareFactory() {
    return (path, callback) => this.instance.use(path, callback);
  }

  applyVersionFilter(handler) {
    return (req, res, next) => handler(req, res, next);
  }

  enableCors() {}
  useStaticAssets() {}
  setViewEngine() {}
  render() {}
  redirect(response, statusCode, url) {
    response.writeHead(statusCode, { location: url }).end();
  }
}
